package main

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unsafe"

	"github.com/kvready/kvready/readiness"
)

// notCSettings is every readiness.Config field that is not a setting of
// kvready_engine_config, with its reason; settings (config.go) is every one
// that is. A field in neither fails TestEveryConfigFieldCrossesIntoC.
var notCSettings = map[string]string{
	"Memory":        "a handle: config.memory (kvready_memory_over)",
	"Fetcher":       "a handle: config.fetcher (kvready_backend_open, kvready_backend_new)",
	"Publisher":     "a handle: config.publisher",
	"Stream":        "the device's: config.device (kvready_sim_device_new, kvready_device_new)",
	"Health":        "the device's: config.device",
	"Device":        "the device's: config.device names one device; its ordinal is the embedder's",
	"Layers":        "parsed from config.layout, the layout document (readiness.LayersOf)",
	"Attention":     "not offered in C: sliding-window readiness is a Go embedder's for now",
	"ExtentName":    "not offered in C: the extent namespace is staging.ExtentName for every C engine",
	"OnTransition":  "a callback: kvready_progress and kvready_changes hand the moves to the owner",
	"OnContainment": "a callback: kvready_containments (kvready_round.containments)",
	"OnRecovery":    "a callback: kvready_recoveries (kvready_round.recoveries)",
	"OnHalt":        "a callback: kvready_round.halted and the engine's last error",
	"OnWake":        "a callback: the library's own, behind kvready_engine_wake_fd",
	"Logger":        "the library's one logger: kvready_set_log",
	"Clock":         "the system clock: a C engine runs on wall time",
	"Observer":      "Go's metrics exporter (package metrics); C reads kvready_engine_stats",
}

// notCFields is every kvready_engine_config field that is no setting.
var notCFields = map[string]string{
	"memory": "handle", "fetcher": "handle", "publisher": "handle", "device": "handle",
	"layout": "Layers", "layout_len": "Layers", "_pad": "padding",
}

// cRenames are the settings whose C name is not their Go name in snake case.
var cRenames = map[string]string{"Containment": "policy"}

// snake is a Go field name in snake case: QuiesceTimeout → quiesce_timeout.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// setC writes v into c's field name (cgo's fields are unexported: reflect
// reads them, and writes them through their address).
func setC(c reflect.Value, name string, v int64) {
	f := c.FieldByName(name)
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().SetInt(v)
}

// Every field of readiness.Config is a setting of kvready_engine_config,
// named by the rule (snake case, durations in _ns), or is listed as none with
// its reason; every field of kvready_engine_config is a setting's or listed.
// Distinct values in every setting's C field come out in the Go field of its
// name, and kvready_engine_config_defaults is readiness.Defaults() in every
// setting.
func TestEveryConfigFieldCrossesIntoC(t *testing.T) {
	goType := reflect.TypeFor[readiness.Config]()
	byName := map[string]setting{}
	for _, s := range settings {
		byName[s.name] = s
	}
	for f := range goType.Fields() {
		s, mapped := byName[f.Name]
		_, listed := notCSettings[f.Name]
		switch {
		case mapped && listed:
			t.Errorf("readiness.Config.%s is both a C setting (config.go's settings) and listed as none", f.Name)
		case !mapped && !listed:
			t.Errorf("readiness.Config.%s crosses into C nowhere: add it to kvready_engine_config (kvready.h, _abi.py, python's Engine) and config.go's settings, or list it in notCSettings with the reason", f.Name)
		case mapped:
			want := snake(f.Name)
			if f.Type == reflect.TypeFor[time.Duration]() {
				want += "_ns"
			}
			if r, ok := cRenames[f.Name]; ok {
				want = r
			}
			if s.cname != want {
				t.Errorf("readiness.Config.%s is kvready_engine_config.%s; the naming rule says %s", f.Name, s.cname, want)
			}
		}
	}
	for name := range notCSettings {
		if _, ok := goType.FieldByName(name); !ok {
			t.Errorf("notCSettings lists %s, which readiness.Config no longer has", name)
		}
	}

	c := configDefaults()
	cv := reflect.ValueOf(&c).Elem()
	cnames := map[string]bool{}
	for _, s := range settings {
		if _, ok := goType.FieldByName(s.name); !ok {
			t.Errorf("settings names readiness.Config.%s, which does not exist", s.name)
		}
		if _, ok := cv.Type().FieldByName(s.cname); !ok {
			t.Errorf("settings names kvready_engine_config.%s, which kvready.h does not declare", s.cname)
		}
		cnames[s.cname] = true
	}
	for f := range cv.Type().Fields() {
		if !cnames[f.Name] && notCFields[f.Name] == "" {
			t.Errorf("kvready_engine_config.%s is no setting of config.go's settings, nor listed in notCFields", f.Name)
		}
	}
	if t.Failed() {
		return
	}

	// Round trip: a distinct value in every setting's C field.
	for i, s := range settings {
		setC(cv, s.cname, int64(i+2))
	}
	var rc readiness.Config
	if err := settingsFromC(&c, &rc); err != nil {
		t.Fatal(err)
	}
	rv := reflect.ValueOf(rc)
	for i, s := range settings {
		if got := intOf(rv.FieldByName(s.name)); got != int64(i+2) {
			t.Errorf("kvready_engine_config.%s = %d came out as readiness.Config.%s = %d", s.cname, i+2, s.name, got)
		}
	}

	// Defaults: the C call is readiness.Defaults() in every setting.
	if st := kvready_engine_config_defaults(&c); st != 0 {
		t.Fatalf("kvready_engine_config_defaults = %d", st)
	}
	dv := reflect.ValueOf(readiness.Defaults())
	for _, s := range settings {
		if got, want := cv.FieldByName(s.cname).Int(), intOf(dv.FieldByName(s.name)); got != want {
			t.Errorf("kvready_engine_config_defaults: %s = %d; readiness.Defaults().%s = %d", s.cname, got, s.name, want)
		}
	}
	checkHeaderDefaults(t, dv)
}

// intOf reads an integer field of any integer kind.
func intOf(v reflect.Value) int64 {
	if v.CanUint() {
		return int64(v.Uint())
	}
	return v.Int()
}

// checkHeaderDefaults holds kvready.h's comments to the library: a setting
// whose line says "default N [unit]" says readiness.Defaults()'s.
func checkHeaderDefaults(t *testing.T, dv reflect.Value) {
	header, err := os.ReadFile("kvready.h")
	if err != nil {
		t.Fatal(err)
	}
	body := string(header)
	body = body[strings.Index(body, "typedef struct kvready_engine_config {"):]
	body = body[:strings.Index(body, "} kvready_engine_config;")]
	units := map[string]time.Duration{"": 1, "ns": time.Nanosecond, "ms": time.Millisecond, "s": time.Second}
	said := 0
	for _, s := range settings {
		m := regexp.MustCompile(`\b` + s.cname + `;.*?default (\d+)(?: (ns|ms|s)\b)?`).FindStringSubmatch(body)
		if m == nil {
			continue
		}
		said++
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if got, want := n*int64(units[m[2]]), intOf(dv.FieldByName(s.name)); got != want {
			t.Errorf("kvready.h says %s defaults to %s; readiness.Defaults().%s is %d", s.cname, strings.TrimSpace(m[1]+" "+m[2]), s.name, want)
		}
	}
	if said < 5 {
		t.Errorf("kvready.h states %d defaults of kvready_engine_config; the pattern no longer matches", said)
	}
}

// notInC is every readiness.Stats leaf kvready_stats does not carry, with its
// reason.
var notInC = map[string]string{
	"FenceLatency":   "a distribution: package metrics exports it as a Prometheus histogram; kvready_stats carries counts and gauges",
	"ReadyLatency":   "a distribution (as FenceLatency)",
	"FailureLatency": "a distribution (as FenceLatency)",
}

// leaf is one counter of readiness.Stats: its path of Go names and of C
// names (array elements as [i]), and its value.
type leaf struct {
	goPath, cPath []string
	v             reflect.Value
}

// leaves walks v (a struct), recursing into structs and arrays.
func leaves(v reflect.Value, goPath, cPath []string, skip map[string]string, out *[]leaf) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if _, ok := skip[f.Name]; ok && len(goPath) == 0 {
				continue
			}
			leaves(v.Field(i), append(goPath[:len(goPath):len(goPath)], f.Name), append(cPath[:len(cPath):len(cPath)], snake(f.Name)), skip, out)
		}
	case reflect.Array:
		for i := range v.Len() {
			idx := fmt.Sprintf("[%d]", i)
			leaves(v.Index(i), append(goPath[:len(goPath):len(goPath)], idx), append(cPath[:len(cPath):len(cPath)], idx), skip, out)
		}
	default:
		*out = append(*out, leaf{goPath, cPath, v})
	}
}

// at follows a path of field names and [i] indices from v.
func at(v reflect.Value, path []string) (reflect.Value, bool) {
	for _, p := range path {
		if strings.HasPrefix(p, "[") {
			i, _ := strconv.Atoi(strings.Trim(p, "[]"))
			if v.Kind() != reflect.Array || i >= v.Len() {
				return reflect.Value{}, false
			}
			v = v.Index(i)
			continue
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		if v = v.FieldByName(p); !v.IsValid() {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// Every counter of readiness.Stats, filled with a distinct value, reaches the
// kvready_stats field of its name in snake case through statsToC (what
// kvready_engine_stats answers), arrays element by element and BackendFaults
// field by field; a kvready_stats field that no counter fills is named too.
func TestEveryCounterReachesC(t *testing.T) {
	var s readiness.Stats
	var ls []leaf
	leaves(reflect.ValueOf(&s).Elem(), nil, nil, notInC, &ls)
	for i, l := range ls {
		switch l.v.Kind() {
		case reflect.Bool:
			l.v.SetBool(true)
		case reflect.Int, reflect.Int64:
			l.v.SetInt(int64(1000 + i))
		default:
			l.v.SetUint(uint64(1000 + i))
		}
	}
	for name := range notInC {
		if _, ok := reflect.TypeFor[readiness.Stats]().FieldByName(name); !ok {
			t.Errorf("notInC lists %s, which readiness.Stats no longer has", name)
		}
	}
	c := statsToC(s)
	cv := reflect.ValueOf(&c).Elem()
	reached := map[string]bool{}
	for i, l := range ls {
		name := strings.ReplaceAll(strings.Join(l.cPath, "."), ".[", "[")
		reached[name] = true
		f, ok := at(cv, l.cPath)
		if !ok {
			t.Errorf("readiness.Stats.%s: kvready_stats has no %s (kvready.h, _abi.py's CStats, python's Stats, statsToC); or list it in notInC with the reason",
				strings.ReplaceAll(strings.Join(l.goPath, "."), ".[", "["), name)
			continue
		}
		want := int64(1000 + i)
		if l.v.Kind() == reflect.Bool {
			want = 1
		}
		if got := intOf(f); got != want {
			t.Errorf("readiness.Stats.%s = %d reached kvready_stats.%s as %d", strings.Join(l.goPath, "."), want, name, got)
		}
	}
	// The other way: every kvready_stats field is filled by a counter, past
	// the arrays' spare room (KVREADY_MAX_STATES), which stays 0.
	var cls []leaf
	leaves(cv, nil, nil, nil, &cls)
	for _, l := range cls {
		name := strings.ReplaceAll(strings.Join(l.goPath, "."), ".[", "[")
		if reached[name] || strings.HasPrefix(name, "_") {
			continue
		}
		if strings.Contains(name, "[") && intOf(l.v) == 0 {
			continue // spare room of an array
		}
		t.Errorf("kvready_stats.%s is filled by no counter of readiness.Stats", name)
	}
}
