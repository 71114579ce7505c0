package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// result is one benchmark's metrics, the median over the runs in the input.
type result struct {
	name    string
	runs    int
	metrics map[string]float64 // unit → value, e.g. "ns/op", "B/slot"
}

// report is a parsed `go test -bench` output.
type report struct {
	env     map[string]string // goos, goarch, pkg, cpu
	results map[string]*result
	order   []string
}

// parse reads `go test -bench -benchmem` output. It keeps every benchmark line
// (name, iterations, then value-unit pairs) and the goos/goarch/cpu lines, and
// ignores everything else. A malformed benchmark line is an error naming the
// line.
func parse(r io.Reader) (*report, error) {
	rep := &report{env: map[string]string{}, results: map[string]*result{}}
	samples := map[string]map[string][]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(text, ": "); ok && (k == "goos" || k == "goarch" || k == "cpu") {
			rep.env[k] = v
			continue
		}
		if !strings.HasPrefix(text, "Benchmark") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 4 || len(fields)%2 != 0 {
			return nil, fmt.Errorf("line %d: %q: want a name, an iteration count and value-unit pairs", line, text)
		}
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return nil, fmt.Errorf("line %d: iteration count %q is not an integer", line, fields[1])
		}
		name := trimProcs(fields[0])
		if samples[name] == nil {
			samples[name] = map[string][]float64{}
			rep.order = append(rep.order, name)
		}
		for i := 2; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: value %q of %s is not a number", line, fields[i], fields[i+1])
			}
			samples[name][fields[i+1]] = append(samples[name][fields[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, name := range rep.order {
		res := &result{name: name, metrics: map[string]float64{}}
		for unit, vs := range samples[name] {
			res.metrics[unit] = median(vs)
			res.runs = max(res.runs, len(vs))
		}
		rep.results[name] = res
	}
	return rep, nil
}

// trimProcs drops the -GOMAXPROCS suffix go test appends to a name.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// metric returns a benchmark's metric and whether it was measured.
func (r *report) metric(name, unit string) (float64, bool) {
	res, ok := r.results[name]
	if !ok {
		return 0, false
	}
	v, ok := res.metrics[unit]
	return v, ok
}
