package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
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
