package readiness

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/kvready/kvready/staging"
)

// MaxDuration bounds every duration of a Config: about 73 years (2^61 ns),
// so that a deadline — the clock plus a request timeout plus a drain grace —
// never wraps the int64 nanoseconds it is kept in.
const MaxDuration = time.Duration(1 << 61)

const (
	defaultRequestTimeout  = 30 * time.Second
	defaultDrainGrace      = 10 * time.Second
	defaultQuiesceTimeout  = time.Second
	defaultRetryBackoff    = time.Millisecond
	defaultMaxRetryBackoff = 250 * time.Millisecond
	defaultKeepReleased    = 1024
	defaultRecoverEvery    = time.Second
)

// Policy is what the engine does when a lease's containment deadline passes
// with access or a local copy unproven (SPEC §4 rule 5). Every policy raises
// the containment signal once and never frees what is unproven.
type Policy uint8

const (
	// Quarantine (the default, as the reference does with one lease): the
	// lease's slots leave circulation for ever; the rest of the engine goes
	// on.
	Quarantine Policy = iota
	// Fatal (the reference's stance: "a fatal lifecycle decision refuses
	// teardown even if late evidence arrives"): the slots are quarantined and
	// the engine halts — it releases nothing any more and reports fatal
	// (ErrHalted wrapping a *FatalError); the manager restarts.
	Fatal
	// Recover (beyond the reference, opt-in): a contained lease whose backend
	// returned an attempt keeps being asked at a slow cadence (RecoverEvery),
	// and a later Quiesce true — with every copy landed — releases its slots,
	// counted and signalled as recovered. Never for a lost device, a local
	// copy that failed, or a submission that escaped without an attempt:
	// those are quarantined as under Quarantine.
	Recover
)

// String names the policy: quarantine, fatal or recover.
func (p Policy) String() string {
	switch p {
	case Quarantine:
		return "quarantine"
	case Fatal:
		return "fatal"
	case Recover:
		return "recover"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy returns the policy named name: quarantine, fatal or recover.
func ParsePolicy(name string) (Policy, error) {
	for p := Quarantine; p <= Recover; p++ {
		if p.String() == name {
			return p, nil
		}
	}
	return 0, fmt.Errorf("readiness: containment policy %q; want quarantine, fatal or recover", name)
}

// validateLifecycle names every problem of the lifecycle's settings at once;
// nil means a Core assembles from them.
func (c *Config) validateLifecycle() []error {
	var errs []error
	if c.Memory == nil {
		errs = append(errs, errors.New("no Memory: want the staging memory from staging.NewMemory or staging.MemoryOver"))
	}
	if c.TokensPerBlock <= 0 {
		errs = append(errs, fmt.Errorf("TokensPerBlock = %d; want a positive number", c.TokensPerBlock))
	}
	if c.Memory != nil && len(c.Attention) > c.Memory.NumGroups() {
		errs = append(errs, fmt.Errorf("the Attention list has %d layer groups; want at most the memory's %d", len(c.Attention), c.Memory.NumGroups()))
	}
	for g, a := range c.Attention {
		if err := a.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("layer group %d's Attention: %w", g, err))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"RequestTimeout", c.RequestTimeout}, {"DrainGrace", c.DrainGrace}, {"QuiesceTimeout", c.QuiesceTimeout},
		{"RetryBackoff", c.RetryBackoff}, {"MaxRetryBackoff", c.MaxRetryBackoff}, {"RecoverEvery", c.RecoverEvery},
	} {
		switch {
		case d.v < 0:
			errs = append(errs, fmt.Errorf("%s = %v; want a non-negative duration (0 means the default)", d.name, d.v))
		case d.v > MaxDuration:
			errs = append(errs, fmt.Errorf("%s = %v; want at most %v (MaxDuration: deadlines are the clock plus these, in int64 nanoseconds)", d.name, d.v, MaxDuration))
		}
	}
	if c.MaxOutstanding < 0 {
		errs = append(errs, fmt.Errorf("MaxOutstanding = %d; want a non-negative number (0 means no bound)", c.MaxOutstanding))
	}
	if c.Containment > Recover {
		errs = append(errs, fmt.Errorf("Containment = %v; want Quarantine, Fatal or Recover", c.Containment))
	}
	errs = append(errs, c.validateLayers()...)
	if c.KeepReleased < 0 {
		errs = append(errs, fmt.Errorf("KeepReleased = %d; want a non-negative number (0 means the default)", c.KeepReleased))
	}
	return errs
}

// withDefaults returns the config with every zero default filled in — the
// one place defaults are set — and the extent name copied.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = newSystemClock()
	}
	if c.MaxOutstanding == 0 {
		c.MaxOutstanding = admissionLimit(c.Fetcher, c.Publisher)
	}
	if c.QuiesceWorkers == 0 {
		c.QuiesceWorkers = defaultQuiesceWorkers
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = defaultRequestTimeout
	}
	if c.DrainGrace == 0 {
		c.DrainGrace = defaultDrainGrace
	}
	if c.QuiesceTimeout == 0 {
		c.QuiesceTimeout = defaultQuiesceTimeout
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = defaultRetryBackoff
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = defaultMaxRetryBackoff
	}
	c.MaxRetryBackoff = max(c.MaxRetryBackoff, c.RetryBackoff)
	if c.KeepReleased == 0 {
		c.KeepReleased = defaultKeepReleased
	}
	if c.RecoverEvery == 0 {
		c.RecoverEvery = defaultRecoverEvery
	}
	if len(c.ExtentName) == 0 {
		c.ExtentName = []byte(staging.ExtentName)
	}
	c.ExtentName = slices.Clone(c.ExtentName)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validateLayers names every problem of Layers: one entry per memory group,
// layer ids ascending within a group, spans inside the group's slot.
func (c *Config) validateLayers() []error {
	if len(c.Layers) == 0 || c.Memory == nil {
		return nil
	}
	var errs []error
	total := 0
	for _, layers := range c.Layers {
		total += len(layers)
	}
	if total == 0 {
		errs = append(errs, errors.New("Layers names no layer; want at least one, or no Layers for whole-slot copies"))
	}
	if n := c.Memory.NumGroups(); len(c.Layers) != n {
		return append(errs, fmt.Errorf("Layers has %d layer groups; want one per memory group (%d), or none for whole-slot copies", len(c.Layers), n))
	}
	for g, layers := range c.Layers {
		slot := c.Memory.Group(g).SlotBytes
		for i, ls := range layers {
			switch {
			case ls.Layer < 0:
				errs = append(errs, fmt.Errorf("Layers[%d][%d]: layer id %d; want >= 0", g, i, ls.Layer))
			case i > 0 && ls.Layer <= layers[i-1].Layer:
				errs = append(errs, fmt.Errorf("Layers[%d]: layer %d after layer %d; want ascending layer ids, each once", g, ls.Layer, layers[i-1].Layer))
			}
			for _, sp := range ls.Spans {
				if sp.Offset < 0 || sp.Size <= 0 || sp.End() > slot {
					errs = append(errs, fmt.Errorf("Layers[%d], layer %d: span of %d bytes at %d; want a non-empty span inside the group's %d-byte slot", g, ls.Layer, sp.Size, sp.Offset, slot))
				}
			}
		}
	}
	return errs
}

// LayersOf returns the Layers of layout: for each layer group, in the
// layout's order, its layers with the spans they occupy in a slot laid out
// as its pool group's. The core stages layer group g's rows in memory group
// g (Row.Group is the local layer group), so layer groups that share a pool
// group in the layout — the reference hashes such layouts — each get their
// own memory group here, with the pool group's slot. An invalid layout is
// refused by its own validation.
func LayersOf(layout staging.Layout) ([][]staging.LayerSpans, error) {
	return layout.LayerSpans()
}
