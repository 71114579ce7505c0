package simulate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Config describes one simulation run. The zero value is not valid; start from
// Defaults and change what the run needs.
type Config struct {
	// Requests is the number of requests served. Each fetches its prompt's
	// blocks and publishes the blocks it had to compute.
	Requests int
	// Blocks is the number of blocks in each request's prompt.
	Blocks int
	// Groups is the number of layer groups: every block has one row per group.
	Groups int
	// Slots is the number of staging slots in each pool group.
	Slots int
	// Share is the fraction of requests whose prompt starts with a prefix shared
	// with other requests (0..1).
	Share float64
	// Families is the number of distinct shared prefixes.
	Families int
	// Arrival is the virtual time between two request arrivals.
	Arrival time.Duration

	// LatencyMedian and LatencySigma describe the log-normal distribution of
	// backend delivery latency: its median and the standard deviation of its
	// logarithm (0 makes every delivery take exactly the median).
	LatencyMedian time.Duration
	LatencySigma  float64
	// Deadline is each request's deadline for an outcome, from the moment it is
	// lent; a delivery slower than that times out.
	Deadline time.Duration
	// GPULatency is how long the simulated device takes to complete a copy.
	GPULatency time.Duration

	// DrainGrace is how long access may stay unproven once the drain starts
	// (at the deadline at the latest) before the engine contains the lease.
	DrainGrace time.Duration
	// StoreCapacity bounds the store: rows beyond it evict the least recently
	// used (an evicted name is a miss). Memory then stays bounded by the work
	// in flight and this capacity, however long the run.
	StoreCapacity int

	// Fault rates, each the probability (0..1) that a submission behaves so;
	// together at most 1. The rest behave normally (serve what the store holds).
	// QuiesceNotYetRate: Quiesce answers "not yet" a few times, then proves the
	// access over (the engine's retries get the proof). NeverProvesRate:
	// Quiesce never proves it (the engine contains the lease at its deadline).
	MissRate, PartialRate, FailRate, CancelRate, QuiesceNotYetRate, NeverProvesRate, RejectRate float64

	// DeviceLossAt loses the device at this virtual time after the start; 0
	// never loses it.
	DeviceLossAt time.Duration
	// Seed makes the workload and the fault choices reproducible.
	Seed uint64
	// Naive replaces the engine by a manager that frees slots as soon as it
	// sees an outcome, an error or a timeout.
	Naive bool
}

// Defaults returns a configuration whose run exercises every outcome kind —
// served, partial, missed, failed, cancelled, rejected and timed out — and
// Quiesce answers that prove the access over only on a retry, in a few
// seconds. Nothing is contained with the defaults: set NeverProvesRate for a
// backend that never proves.
func Defaults() Config {
	return Config{
		Requests:          2000,
		Blocks:            8,
		Groups:            2,
		Slots:             512,
		Share:             0.7,
		Families:          24,
		Arrival:           100 * time.Microsecond,
		LatencyMedian:     time.Millisecond,
		LatencySigma:      1.0,
		Deadline:          10 * time.Millisecond,
		GPULatency:        50 * time.Microsecond,
		DrainGrace:        20 * time.Millisecond,
		StoreCapacity:     1 << 14,
		MissRate:          0.08,
		PartialRate:       0.08,
		FailRate:          0.04,
		CancelRate:        0.04,
		QuiesceNotYetRate: 0.05,
		RejectRate:        0.01,
		Seed:              1,
	}
}

// FieldError names the configuration field (the CLI flag) that is wrong.
type FieldError struct {
	Field string // the flag name, e.g. "requests"
	Msg   string // what was given and what is wanted
}

// Error formats the field and the message, e.g. "requests: 0; want 1..1000000".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Limits that keep a run within memory and time a demo can afford.
const (
	maxRequests = 1_000_000
	maxBlocks   = 4096
	maxGroups   = 64
	maxSlots    = 1 << 20
	maxFamilies = 1 << 20
	maxLatency  = time.Hour
)

// Validate reports every invalid field at once, each as a *FieldError.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	intIn := func(field string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(field, "%d; want %d..%d", v, lo, hi)
		}
	}
	intIn("requests", c.Requests, 1, maxRequests)
	intIn("blocks", c.Blocks, 1, maxBlocks)
	intIn("groups", c.Groups, 1, maxGroups)
	intIn("slots", c.Slots, 1, maxSlots)
	intIn("families", c.Families, 1, maxFamilies)
	if c.Slots >= 1 && c.Blocks >= 1 && c.Blocks > c.Slots {
		bad("slots", "%d slots per group cannot hold one request's %d blocks; want slots >= blocks", c.Slots, c.Blocks)
	}
	prob := func(field string, v float64) {
		if math.IsNaN(v) || v < 0 || v > 1 {
			bad(field, "%v; want a probability in 0..1", v)
		}
	}
	prob("share", c.Share)
	rates := []struct {
		field string
		v     float64
	}{{"miss-rate", c.MissRate}, {"partial-rate", c.PartialRate}, {"fail-rate", c.FailRate},
		{"cancel-rate", c.CancelRate}, {"quiesce-not-yet-rate", c.QuiesceNotYetRate},
		{"never-proves-rate", c.NeverProvesRate}, {"reject-rate", c.RejectRate}}
	sum := 0.0
	var named []string
	for _, r := range rates {
		prob(r.field, r.v)
		if r.v > 0 {
			named = append(named, fmt.Sprintf("%s %g", r.field, r.v))
		}
		sum += r.v
	}
	if sum > 1+1e-9 {
		bad("fault-rates", "%s add up to %.3f; want at most 1", strings.Join(named, " + "), sum)
	}
	if c.StoreCapacity < 0 {
		bad("store-capacity", "%d; want a non-negative number of rows (0: unbounded)", c.StoreCapacity)
	}
	dur := func(field string, v time.Duration, zeroOK bool) {
		switch {
		case v < 0 || (v == 0 && !zeroOK):
			bad(field, "%v; want a positive duration", v)
		case v > maxLatency:
			bad(field, "%v; want at most %v", v, maxLatency)
		}
	}
	dur("arrival", c.Arrival, false)
	dur("latency-median", c.LatencyMedian, false)
	dur("deadline", c.Deadline, false)
	dur("gpu-latency", c.GPULatency, false)
	dur("drain-grace", c.DrainGrace, false)
	dur("device-loss-at", c.DeviceLossAt, true)
	if math.IsNaN(c.LatencySigma) || c.LatencySigma < 0 || c.LatencySigma > 4 {
		bad("latency-sigma", "%v; want 0..4", c.LatencySigma)
	}
	return errors.Join(errs...)
}
