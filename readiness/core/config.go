package core

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/kvready/kvready/staging"
)

// Config assembles a Core. Memory and TokensPerBlock are required; every
// duration left at zero takes its default. The runner (package readiness)
// flattens it into its own Config, field for field under the same names (its
// tests check that none is missing), where an embedder reads each field's
// documentation.
type Config struct {
	// Memory is the staging memory the core lends, one pool group per local
	// layer group: staging.NewMemory with the device's pinned host allocator,
	// or staging.MemoryOver slabs the caller pinned (staging.GoHeap only with
	// the simulated device). Required.
	Memory *staging.Memory
	// TokensPerBlock is the number of token positions in one block. Required.
	TokensPerBlock int
	// Attention is each local layer group's attention: a sliding window and
	// its sink blocks, or full attention (the zero value, and every group past
	// the end of the list). Readiness needs of a window group only its sinks
	// and its window (see staging.WindowedReadiness).
	Attention []staging.Attention
	// ExtentName is the extent namespace; empty means staging.ExtentName.
	ExtentName []byte
	// Layers is, for each local layer group (the memory group its rows'
	// Row.Group names), the group's layers in ascending layer id, each with
	// the byte spans it occupies in one of the group's slots:
	// staging.Layout.LayerSpans when layer group g's pool group is memory
	// group g (LayersOf checks that). A fetch's staging→device copies then go
	// layer by layer, in ascending layer id across the groups: each layer's
	// spans of every served row, then one event, so that layer l is ready
	// when its event completed (SPEC §4 rule 16). A row's device memory
	// mirrors its staging slot: the span at offset o goes to Row.Device + o.
	// Empty: the whole slot is one layer — the same path, one event.
	Layers [][]staging.LayerSpans

	// RequestTimeout is the deadline, after the submission, of a request that
	// names none (default 30s).
	RequestTimeout time.Duration
	// DrainGrace is how long access or a local copy may stay unproven once the
	// drain has started — at the request deadline at the latest, earlier on a
	// failure, a cancel, a Quiesce that could not answer true, an escaped
	// submission or a failed copy — before the slots are contained (default
	// 10s).
	DrainGrace time.Duration
	// QuiesceTimeout bounds each Quiesce call (default 1s). On the engine's
	// clock it decides: a call still unanswered then proves nothing for now —
	// the drain starts, and its context is cancelled — though a true it
	// answers later is still taken. The runner also cancels a call's context
	// after as long in real time, so that a backend waiting on a clock that
	// does not move never pins a worker.
	QuiesceTimeout time.Duration
	// RetryBackoff is the wait before asking Quiesce again after an answer
	// that proved nothing (default 1ms); it doubles on each retry, up to
	// MaxRetryBackoff (default 250ms).
	RetryBackoff, MaxRetryBackoff time.Duration
	// KeepReleased is how many of the latest released leases stay readable
	// through their handles (Lease, Readiness); default 1024.
	KeepReleased int

	// MaxOutstanding bounds the submissions outstanding at the backend: from
	// admission until the lease's access is fenced (or it is contained). A
	// staged lease beyond the bound waits, holding its slots but exposing
	// nothing, in arrival order (SPEC §4 rule 12): its request deadline starts
	// only at its submission, so it measures the backend's service, never the
	// engine's queue. 0 means no bound (the runner takes the backend's own
	// AdmissionLimit when it has one).
	MaxOutstanding int
	// Containment is what containment does (SPEC §4 rule 5): Quarantine (the
	// default), Fatal or Recover.
	Containment Policy
	// RecoverEvery is how often a contained lease's backend is asked again
	// under the Recover policy (default 1s): the slow cadence.
	RecoverEvery time.Duration

	// OnTransition, if set, is called for every move, for tracing. It must not
	// call the engine.
	OnTransition func(Transition)
	// Logger receives the few events worth logging (quarantine, containment,
	// ungrantable leases, contract violations, device loss, a halt); nil
	// means slog.Default().
	Logger *slog.Logger
}

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

// Validate names every problem of the config at once; nil means it assembles.
func (c *Config) Validate() []error {
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
		{"RetryBackoff", c.RetryBackoff}, {"MaxRetryBackoff", c.MaxRetryBackoff},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s = %v; want a non-negative duration (0 means the default)", d.name, d.v))
		}
	}
	if c.MaxOutstanding < 0 {
		errs = append(errs, fmt.Errorf("MaxOutstanding = %d; want a non-negative number (0 means no bound)", c.MaxOutstanding))
	}
	if c.Containment > Recover {
		errs = append(errs, fmt.Errorf("Containment = %v; want Quarantine, Fatal or Recover", c.Containment))
	}
	if c.RecoverEvery < 0 {
		errs = append(errs, fmt.Errorf("RecoverEvery = %v; want a non-negative duration (0 means the default)", c.RecoverEvery))
	}
	errs = append(errs, c.validateLayers()...)
	if c.KeepReleased < 0 {
		errs = append(errs, fmt.Errorf("KeepReleased = %d; want a non-negative number (0 means the default)", c.KeepReleased))
	}
	return errs
}

// withDefaults returns the config with every zero default filled in and the
// extent name copied.
func (c Config) withDefaults() Config {
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
