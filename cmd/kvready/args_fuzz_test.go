package main

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvready/kvready/simulate"
)

// FuzzNameArgs: the --layers, --shards and hex parsers never panic; what they
// accept round-trips, and what they refuse names its flag. --layers refuses
// only what is not a list of non-negative integers: empty groups, a layer in
// two groups and a layer twice in one are the reference's to hash.
func FuzzNameArgs(f *testing.F) {
	f.Add("4,5/0,1,2,3", "4:3/1:0", "00ff")
	f.Add("", "", "0")
	f.Add("1//2", "1:0", "zz")
	f.Add("-1", "0:0", "")
	f.Add("4/4", "1:0/2:1", "")
	f.Add("4,4/", "1:0/", "")
	f.Add("/", "1:0//1:0", "")
	f.Add("4,,5", "", "")
	f.Fuzz(func(t *testing.T, layers, shards, hexArg string) {
		ls, err := parseLayers(layers)
		if err != nil {
			if err.flag != "--layers" {
				t.Fatalf("a --layers refusal names %q", err.flag)
			}
		} else {
			var groups []string
			if len(ls) != strings.Count(layers, "/")+1 {
				t.Fatalf("%q parsed to %d groups; every entry between slashes is one", layers, len(ls))
			}
			for _, g := range ls {
				var ids []string
				for _, id := range g {
					if id < 0 {
						t.Fatalf("accepted a negative layer id in %q", layers)
					}
					ids = append(ids, strconv.Itoa(id))
				}
				groups = append(groups, strings.Join(ids, ","))
			}
			if again, err := parseLayers(strings.Join(groups, "/")); err != nil || !slices.EqualFunc(again, ls, slices.Equal) {
				t.Fatalf("%q parsed to %v, which does not parse back (%v, %v)", layers, ls, again, err)
			}
			sh, err := parseShards(shards, len(ls))
			if err != nil && err.flag != "--shards" {
				t.Fatalf("a --shards refusal names %q", err.flag)
			}
			for _, s := range sh {
				if err == nil && (s.Count < 1 || s.Index < 0 || s.Index >= s.Count) {
					t.Fatalf("accepted shard %+v from %q", s, shards)
				}
			}
		}
		b, herr := parseHex("--key-hex", hexArg, -1)
		if herr == nil && 2*len(b) != len(hexArg) {
			t.Fatalf("%q decoded to %d bytes", hexArg, len(b))
		}
	})
}

// FuzzCutLong: cutting long words never panics, leaves short text alone and
// leaves no word much longer than longWord.
func FuzzCutLong(f *testing.F) {
	f.Add("a short line")
	f.Add(strings.Repeat("x", 300) + " tail")
	f.Add(strings.Repeat("é", 100))
	f.Fuzz(func(t *testing.T, s string) {
		out := cutLong(s)
		if len(s) <= longWord && out != s {
			t.Fatalf("short text changed: %q -> %q", s, out)
		}
		for _, w := range strings.Fields(out) {
			if len(w) > longWord {
				t.Fatalf("a %d-byte word survived in %q", len(w), out)
			}
		}
	})
}

// FuzzBackendArg: --backend never panics, whatever it is given. A stack of
// tiers that parses writes back (TierSpec.String) to a stack that parses to
// the same tiers, has 2 to MaxTiers tiers with unique names, a Redis tier
// only last and every bound at least a row; one refused is refused by the
// configuration too, against --backend alone, naming what is wanted.
func FuzzBackendArg(f *testing.F) {
	f.Add("mem?capacity=64KiB,redis://127.0.0.1:6379/0")
	f.Add("mem,mem")
	f.Add("mem?capacity=1MiB,mem?capacity=2MB,unix:///tmp/r.sock")
	f.Add("redis://127.0.0.1:1/0,mem")
	f.Add("mem?capacity=1&capacity=2,mem")
	f.Add("mem?capacity=%zz,")
	f.Add(",,,")
	f.Add("mem?capacity=63,rediss://:pw@h:1?breaker_failures=0")
	f.Fuzz(func(t *testing.T, backend string) {
		cfg := simulate.Defaults().WithoutFaults()
		cfg.Backend = backend
		verr := cfg.Validate() // never panics, whatever the store
		if !cfg.Tiered() {
			return
		}
		specs, err := simulate.ParseTiers(backend)
		if err != nil {
			if specs != nil {
				t.Fatalf("%q refused (%v) with tiers %v", backend, err, specs)
			}
			if !strings.Contains(err.Error(), "want") {
				t.Fatalf("%q: the refusal says nothing of what is wanted: %v", backend, err)
			}
			var fe *simulate.FieldError
			if !errors.As(verr, &fe) || fe.Field != "backend" {
				t.Fatalf("%q: ParseTiers refuses it, Validate says %v", backend, verr)
			}
			return
		}
		if len(specs) < 2 || len(specs) > simulate.MaxTiers {
			t.Fatalf("%q parsed to %d tiers", backend, len(specs))
		}
		names := map[string]bool{}
		parts := make([]string, len(specs))
		for i, s := range specs {
			if names[s.Name] || s.Name == "" {
				t.Fatalf("%q: tier %d named %q twice or not at all", backend, i, s.Name)
			}
			names[s.Name] = true
			if s.URL != "" && i != len(specs)-1 {
				t.Fatalf("%q: a Redis tier at %d of %d", backend, i, len(specs))
			}
			if s.CapacityBytes != 0 && s.CapacityBytes < simulate.SlotBytes {
				t.Fatalf("%q: tier %d bound to %d bytes, under a row", backend, i, s.CapacityBytes)
			}
			parts[i] = s.String()
		}
		again, err := simulate.ParseTiers(strings.Join(parts, ","))
		if err != nil || !slices.Equal(again, specs) {
			t.Fatalf("%q parsed to %v, which writes %v and parses back to %v (%v)", backend, specs, parts, again, err)
		}
	})
}
