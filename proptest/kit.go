package proptest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvready/kvready/contract"
	"pgregory.net/rapid"
)

// Memory is the staging memory the kit lends a backend under test: Row
// resolves a unit's coordinates (local_group, local) to its row, as the
// engine's staging does. It is safe for concurrent use.
type Memory interface {
	Row(localGroup, local int) ([]byte, bool)
}

// FetchSubject is one fetching backend under test, built fresh for each trial.
type FetchSubject struct {
	// Fetcher is the backend.
	Fetcher contract.Fetcher
	// Put stores row under (extent, name), as an earlier publication would,
	// so that a fetch can find it. Required.
	Put func(extent string, name contract.Name, row []byte)
	// Close, if set, ends the backend after the trial.
	Close func() error
}

// PublishSubject is one publishing backend under test, built fresh for each
// trial.
type PublishSubject struct {
	// Publisher is the backend.
	Publisher contract.Publisher
	// Get, if set, reads back what a publication stored under (extent, name),
	// so the kit can check that what was published is what was staged.
	Get func(extent string, name contract.Name) ([]byte, bool)
	// Close, if set, ends the backend after the trial.
	Close func() error
}

// NewFetcher builds a fetching backend over the kit's staging memory.
type NewFetcher func(mem Memory) (FetchSubject, error)

// NewPublisher builds a publishing backend over the kit's staging memory.
type NewPublisher func(mem Memory) (PublishSubject, error)

// Option adjusts a conformance check.
type Option func(*kitConfig)

type kitConfig struct {
	mayFail  bool
	wait     time.Duration
	failDir  string
	failDirs bool // failDir was set by FailFiles
}

// MayFail declares that the backend under test fails or cancels deliveries
// on purpose (fault injection). A failure is then indistinguishable from a
// miss reported as a failure, so the known-miss rule is not checked; every
// other rule is.
func MayFail() Option { return func(c *kitConfig) { c.mayFail = true } }

// Wait bounds each Settle and Quiesce call the kit makes (default 2s).
func Wait(d time.Duration) Option { return func(c *kitConfig) { c.wait = d } }

// FailFiles names the directory where the kit keeps rapid's failure file of a
// failed check (replay it with -rapid.failfile=PATH). By default it goes to
// DefaultFailDir, never into the testdata/ of the package under test;
// FailFiles("") leaves it where rapid puts it (testdata/rapid/ of the package).
func FailFiles(dir string) Option {
	return func(c *kitConfig) { c.failDir, c.failDirs = dir, true }
}

// DefaultFailDir is where the kit keeps failure files unless FailFiles says
// otherwise: kvready-conformance under the system's temporary directory.
func DefaultFailDir() string { return filepath.Join(os.TempDir(), "kvready-conformance") }

// TB is what the kit needs of a test: *testing.T has it.
type TB = rapid.TB

// The rules the kit checks, as named in a Violation.
const (
	RuleServedSubset      = "served names are a subset of the requested ones"
	RuleUnservedUntouched = "unserved destinations are left untouched"
	RuleOutsideUntouched  = "memory outside the extent is never touched"
	RuleServedContent     = "served destinations hold the stored content"
	RuleStable            = "an outcome, once returned, never changes"
	RuleNoLateWrite       = "no write after Quiesce answered true"
	RuleKnownMiss         = "a known-absent name is a miss, never a failure"
	RuleRejectedNoEffect  = "SubmissionRejected has no effects"
	RuleProbe             = "Probe is advisory and reports failure as an error"
	RuleQuiesceCancelled  = "Quiesce with a cancelled context is never true"
	RuleAttemptOrError    = "a submission returns an attempt or SubmissionRejected, never both or neither"
	RuleSettle            = "Settle returns once every attempt has an outcome"
	RulePublishedContent  = "what is published is what was staged"
	RulePublishReadOnly   = "a publication never writes its sources"
)

// Violation is one broken rule, found by a conformance check.
type Violation struct {
	Rule   string
	Detail string
}

// Error formats the violation as "conformance: rule: detail".
func (v *Violation) Error() string { return "conformance: " + v.Rule + ": " + v.Detail }

func violation(rule, format string, args ...any) error {
	return &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// CheckFetcher runs the conformance kit against a fetching backend: random
// extents over real staging memory filled with canary bytes, one fresh backend
// per trial (rapid, RAPID_CHECKS trials). It checks that served names are a
// subset of the requested ones, that unserved destinations and memory outside
// the extent are untouched, that served destinations hold the stored content,
// that outcomes never change, that nothing is written after Quiesce answered
// true (the canaries are read again after further calls into the backend),
// that a fetch of known-absent names is a miss and not a failure (unless
// MayFail), that SubmissionRejected has no effects, that Probe answers subsets
// and reports a failure as an error, and that Quiesce with a cancelled
// context is never true. Memory is read only once Quiesce answered true.
//
// Trials differ in when they first ask Quiesce: half ask right after the
// submission, while copies may still be pending, and then watch the memory
// through Settle, so a backend that answers true before its last write has
// landed is caught within a few trials. A changed outcome is reported under
// the stability rule even when one of its answers would also break the
// known-miss rule: that verdict waits for the last poll.
func CheckFetcher(t TB, newSubject NewFetcher, opts ...Option) {
	t.Helper()
	cfg := config(opts)
	rapid.Check(cfg.wrap(t), func(rt *rapid.T) {
		tr := trialGen.Draw(rt, "trial")
		if err := fetchTrial(newSubject, tr, cfg); err != nil {
			rt.Fatal(err)
		}
	})
}

// CheckPublisher runs the conformance kit against a publishing backend:
// random extents of staged rows over real memory, one fresh backend per trial.
// It checks that published names are a subset of the requested ones, that a
// publication never writes its sources (not even after Quiesce answered true),
// that outcomes never change, that SubmissionRejected has no effects, that
// Quiesce with a cancelled context is never true, and, when the subject can
// read back (Get), that what was published is what was staged.
func CheckPublisher(t TB, newSubject NewPublisher, opts ...Option) {
	t.Helper()
	cfg := config(opts)
	rapid.Check(cfg.wrap(t), func(rt *rapid.T) {
		tr := trialGen.Draw(rt, "trial")
		if err := publishTrial(newSubject, tr, cfg); err != nil {
			rt.Fatal(err)
		}
	})
}

func config(opts []Option) kitConfig {
	cfg := kitConfig{wait: 2 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.failDirs {
		cfg.failDir = DefaultFailDir()
	}
	return cfg
}

// kitUnit is one unit of a trial: where it lives and whether the store has it.
type kitUnit struct {
	Group, Slot int
	Name        contract.Name
	Stored      bool
	Content     []byte
}

// trial is one random extent over staging memory.
type trial struct {
	Groups, Slots, SlotBytes int
	Units                    []kitUnit
	IsLast                   bool
	// QuiesceFirst asks Quiesce right after the submission, before Settle,
	// while copies may still be pending.
	QuiesceFirst bool
}

// GoString is how rapid prints a drawn trial: names as short hex prefixes.
func (tr trial) GoString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trial{groups %d, slots %d, %d-byte slots, is_last %v, quiesce_first %v, units [",
		tr.Groups, tr.Slots, tr.SlotBytes, tr.IsLast, tr.QuiesceFirst)
	for i, u := range tr.Units {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(u.GoString())
	}
	b.WriteString("]}")
	return b.String()
}

// GoString prints a unit with its name as a short hex prefix.
func (u kitUnit) GoString() string {
	stored := "absent"
	if u.Stored {
		stored = "stored"
	}
	return fmt.Sprintf("(%d,%d) %s %s", u.Group, u.Slot, short(u.Name), stored)
}

// short is a name's first 4 bytes in hex, enough to tell a trial's names apart.
func short(n contract.Name) string { return fmt.Sprintf("%x…", n[:4]) }

const kitExtent = "kvready:conformance:1"

var trialGen = rapid.Custom(func(t *rapid.T) trial {
	tr := trial{
		Groups:       rapid.IntRange(1, 2).Draw(t, "groups"),
		Slots:        rapid.IntRange(2, 6).Draw(t, "slots"),
		SlotBytes:    rapid.SampledFrom([]int{8, 16, 64}).Draw(t, "slot_bytes"),
		IsLast:       rapid.Bool().Draw(t, "is_last"),
		QuiesceFirst: rapid.Bool().Draw(t, "quiesce_first"),
	}
	allAbsent := rapid.IntRange(0, 3).Draw(t, "all_absent") == 0
	for g := range tr.Groups {
		used := rapid.SliceOfNDistinct(rapid.IntRange(0, tr.Slots-1), 0, tr.Slots, rapid.ID[int]).Draw(t, fmt.Sprintf("slots%d", g))
		for _, s := range used {
			var n contract.Name
			n[0], n[1], n[2] = 0xC1, byte(g), byte(s)
			n[3] = byte(rapid.IntRange(0, 255).Draw(t, "salt"))
			u := kitUnit{Group: g, Slot: s, Name: n, Stored: !allAbsent && rapid.Bool().Draw(t, "stored")}
			u.Content = make([]byte, tr.SlotBytes)
			for i := range u.Content {
				u.Content[i] = byte(g*61 + s*17 + i + 1)
			}
			tr.Units = append(tr.Units, u)
		}
	}
	return tr
})

// kitMemory is the trial's staging memory: one slab per group, every byte a
// canary that names its own position until something writes it.
type kitMemory struct {
	slabs     [][]byte
	slotBytes int
}

func newKitMemory(tr trial) *kitMemory {
	m := &kitMemory{slotBytes: tr.SlotBytes}
	for range tr.Groups {
		m.slabs = append(m.slabs, make([]byte, tr.Slots*tr.SlotBytes))
	}
	for g, slab := range m.slabs {
		for i := range slab {
			slab[i] = canary(g, i)
		}
	}
	return m
}

func canary(g, i int) byte { return byte(0xA0 ^ g<<4 ^ i*7) }

func (m *kitMemory) Row(g, s int) ([]byte, bool) {
	if g < 0 || g >= len(m.slabs) || s < 0 || (s+1)*m.slotBytes > len(m.slabs[g]) {
		return nil, false
	}
	return m.slabs[g][s*m.slotBytes : (s+1)*m.slotBytes : (s+1)*m.slotBytes], true
}

func (m *kitMemory) snapshot() [][]byte {
	out := make([][]byte, len(m.slabs))
	for g, s := range m.slabs {
		out[g] = append([]byte(nil), s...)
	}
	return out
}

// diff describes the first byte that differs from snap, or "".
func (m *kitMemory) diff(snap [][]byte) string {
	for g, slab := range m.slabs {
		for i := range slab {
			if slab[i] != snap[g][i] {
				return fmt.Sprintf("group %d slot %d byte %d: %#x, was %#x", g, i/m.slotBytes, i%m.slotBytes, slab[i], snap[g][i])
			}
		}
	}
	return ""
}

func (tr trial) extent() (contract.CacheExtent, []contract.Name, error) {
	units := make([]contract.Unit, len(tr.Units))
	names := make([]contract.Name, len(tr.Units))
	for i, u := range tr.Units {
		units[i] = contract.Unit{Name: u.Name, LocalGroup: u.Group, Local: u.Slot}
		names[i] = u.Name
	}
	ext, err := contract.NewCacheExtent([]byte(kitExtent), units, tr.IsLast)
	return ext, names, err
}

func (tr trial) inExtent(g, s int) (kitUnit, bool) {
	for _, u := range tr.Units {
		if u.Group == g && u.Slot == s {
			return u, true
		}
	}
	return kitUnit{}, false
}

// settle waits for the outcome and checks it is stable across polls.
func settle(a contract.Attempt, settleFn func(context.Context, []contract.Attempt) error, cfg kitConfig) (contract.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.wait)
	defer cancel()
	if err := settleFn(ctx, []contract.Attempt{a}); err != nil {
		return nil, violation(RuleSettle, "Settle: %v", err)
	}
	first := a.Poll()
	if first == nil {
		return nil, violation(RuleSettle, "Settle returned but Poll has no outcome")
	}
	for range 3 {
		if o := a.Poll(); !sameOutcome(first, o) {
			return nil, violation(RuleStable, "Poll answered %v, then %v", first, o)
		}
	}
	return first, nil
}

// quiesce asks, with a cancelled context first (never true), then for real,
// a few times. It reports whether access was proven over.
func quiesce(a contract.Attempt, fn func(context.Context, []contract.Attempt) (bool, error), cfg kitConfig) (bool, error) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if ok, err := fn(done, []contract.Attempt{a}); ok && err == nil {
		return false, violation(RuleQuiesceCancelled, "Quiesce answered true with a cancelled context")
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.wait)
		ok, err := fn(ctx, []contract.Attempt{a})
		cancel()
		if ok && err == nil {
			return true, nil
		}
	}
	return false, nil
}

func closeSubject(c func() error) {
	if c != nil {
		_ = c()
	}
}

func fetchTrial(newSubject NewFetcher, tr trial, cfg kitConfig) error {
	mem := newKitMemory(tr)
	sub, err := newSubject(mem)
	if err != nil {
		return fmt.Errorf("conformance: building the backend: %w", err)
	}
	defer closeSubject(sub.Close)
	if sub.Fetcher == nil || sub.Put == nil {
		return errors.New("conformance: the FetchSubject needs a Fetcher and Put")
	}
	anyStored := false
	for _, u := range tr.Units {
		if u.Stored {
			sub.Put(kitExtent, u.Name, u.Content)
			anyStored = true
		}
	}
	ext, names, err := tr.extent()
	if err != nil {
		return fmt.Errorf("conformance: building the extent: %w", err)
	}
	before := mem.snapshot()
	if err := checkProbe(sub.Fetcher, tr, names, cfg); err != nil {
		return err
	}
	if d := mem.diff(before); d != "" {
		return violation(RuleOutsideUntouched, "Probe wrote staging memory: %s", d)
	}

	a, err := sub.Fetcher.Fetch(ext, nil)
	switch {
	case a == nil && !errors.Is(err, contract.ErrSubmissionRejected):
		return violation(RuleAttemptOrError, "Fetch returned no attempt and %v", err)
	case a != nil && err != nil:
		return violation(RuleAttemptOrError, "Fetch returned an attempt and the error %v", err)
	case a == nil:
		time.Sleep(time.Millisecond) // a stray goroutine would have its chance to write
		if d := mem.diff(before); d != "" {
			return violation(RuleRejectedNoEffect, "a rejected fetch wrote staging memory: %s", d)
		}
		return nil
	}
	var early [][]byte // memory when Quiesce, asked before the outcome, answered true
	if tr.QuiesceFirst {
		proven, err := quiesce(a, sub.Fetcher.Quiesce, cfg)
		if err != nil {
			return err
		}
		if proven {
			early = mem.snapshot()
		}
	}
	o, err := settle(a, sub.Fetcher.Settle, cfg)
	if err != nil {
		return err
	}
	if early != nil {
		if d := mem.diff(early); d != "" {
			return violation(RuleNoLateWrite, "Quiesce, asked before the outcome, answered true; then the delivery wrote %s", d)
		}
	}
	served := contract.NameSet{}
	var knownMiss error // reported last: a changed outcome is a stability break first
	switch x := o.(type) {
	case contract.Delivered:
		served = x.Served
		asked := contract.NewNameSet(names...)
		for n := range served.All() {
			if !asked.Has(n) {
				return violation(RuleServedSubset, "served %s, which the extent did not ask for", short(n))
			}
		}
	case contract.Failed, contract.Cancelled:
		if !anyStored && !cfg.mayFail {
			knownMiss = violation(RuleKnownMiss, "fetching %d names the store never had answered %v", len(names), o)
		}
	}
	proven, err := quiesce(a, sub.Fetcher.Quiesce, cfg)
	if err != nil || !proven {
		// Access never proven over: the memory may not be read.
		if o2 := a.Poll(); !sameOutcome(o, o2) {
			return violation(RuleStable, "Poll answered %v, then %v", o, o2)
		}
		return cmp.Or(err, knownMiss)
	}
	// From the proof on, nothing may change: read every canary, call into the
	// backend again (a late writer gets its chance), and read them again.
	after := mem.snapshot()
	poke(a, sub.Fetcher.Settle, sub.Fetcher.Quiesce, cfg)
	_, _, _ = sub.Fetcher.Probe(context.Background(), []byte(kitExtent), names)
	time.Sleep(time.Millisecond)
	if d := mem.diff(after); d != "" {
		return violation(RuleNoLateWrite, "%s", d)
	}
	if o2 := a.Poll(); !sameOutcome(o, o2) {
		return violation(RuleStable, "Poll answered %v, then %v after Quiesce", o, o2)
	}
	_, delivered := o.(contract.Delivered)
	for g := range tr.Groups {
		for s := range tr.Slots {
			row, _ := mem.Row(g, s)
			u, in := tr.inExtent(g, s)
			switch {
			case !in:
				if string(row) != string(before[g][s*tr.SlotBytes:(s+1)*tr.SlotBytes]) {
					return violation(RuleOutsideUntouched, "slot (%d,%d), in no unit, was written: %x", g, s, row)
				}
			case delivered && served.Has(u.Name):
				if !u.Stored || string(row) != string(u.Content) {
					return violation(RuleServedContent, "unit (%d,%d) served, holding %x; stored %v %x", g, s, row, u.Stored, u.Content)
				}
			case delivered:
				if string(row) != string(before[g][s*tr.SlotBytes:(s+1)*tr.SlotBytes]) {
					return violation(RuleUnservedUntouched, "unit (%d,%d) was not served but was written: %x", g, s, row)
				}
			}
		}
	}
	return knownMiss
}

func poke(a contract.Attempt, settleFn func(context.Context, []contract.Attempt) error, q func(context.Context, []contract.Attempt) (bool, error), cfg kitConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.wait)
	defer cancel()
	a.Poll()
	_ = settleFn(ctx, []contract.Attempt{a})
	_, _ = q(ctx, []contract.Attempt{a})
}

// checkProbe: hits are a subset of the probed names; "cannot answer" carries
// no hits; a failure is an error, never an empty answer that hides hits.
func checkProbe(f contract.Fetcher, tr trial, names []contract.Name, cfg kitConfig) error {
	probed := contract.NewNameSet(names...)
	check := func(ctx context.Context, what string) error {
		hits, answered, err := f.Probe(ctx, []byte(kitExtent), names)
		if err != nil {
			return nil
		}
		if !answered && hits.Len() > 0 {
			return violation(RuleProbe, "%s: not answered, yet %d hits", what, hits.Len())
		}
		for n := range hits.All() {
			if !probed.Has(n) {
				return violation(RuleProbe, "%s: hit %s was never probed", what, short(n))
			}
		}
		if answered && !cfg.mayFail {
			for _, u := range tr.Units {
				if u.Stored && !hits.Has(u.Name) {
					return violation(RuleProbe, "%s: answered without the stored name %s: a failure reported as an empty answer", what, short(u.Name))
				}
			}
		}
		return nil
	}
	if err := check(context.Background(), "Probe"); err != nil {
		return err
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return check(done, "Probe with a cancelled context")
}

func publishTrial(newSubject NewPublisher, tr trial, cfg kitConfig) error {
	mem := newKitMemory(tr)
	sub, err := newSubject(mem)
	if err != nil {
		return fmt.Errorf("conformance: building the backend: %w", err)
	}
	defer closeSubject(sub.Close)
	if sub.Publisher == nil {
		return errors.New("conformance: the PublishSubject needs a Publisher")
	}
	for _, u := range tr.Units {
		row, _ := mem.Row(u.Group, u.Slot)
		copy(row, u.Content)
	}
	ext, names, err := tr.extent()
	if err != nil {
		return fmt.Errorf("conformance: building the extent: %w", err)
	}
	before := mem.snapshot()
	a, err := sub.Publisher.Publish(ext)
	switch {
	case a == nil && !errors.Is(err, contract.ErrSubmissionRejected):
		return violation(RuleAttemptOrError, "Publish returned no attempt and %v", err)
	case a != nil && err != nil:
		return violation(RuleAttemptOrError, "Publish returned an attempt and the error %v", err)
	case a == nil:
		time.Sleep(time.Millisecond)
		if d := mem.diff(before); d != "" {
			return violation(RuleRejectedNoEffect, "a rejected publication wrote staging memory: %s", d)
		}
		return nil
	}
	o, err := settle(a, sub.Publisher.Settle, cfg)
	if err != nil {
		return err
	}
	d, delivered := o.(contract.Delivered)
	if delivered {
		asked := contract.NewNameSet(names...)
		for n := range d.Served.All() {
			if !asked.Has(n) {
				return violation(RuleServedSubset, "published %s, which the extent did not hold", short(n))
			}
		}
	}
	proven, err := quiesce(a, sub.Publisher.Quiesce, cfg)
	if err != nil || !proven {
		return err
	}
	if diff := mem.diff(before); diff != "" {
		return violation(RulePublishReadOnly, "%s", diff)
	}
	poke(a, sub.Publisher.Settle, sub.Publisher.Quiesce, cfg)
	time.Sleep(time.Millisecond)
	if diff := mem.diff(before); diff != "" {
		return violation(RuleNoLateWrite, "%s", diff)
	}
	if o2 := a.Poll(); !sameOutcome(o, o2) {
		return violation(RuleStable, "Poll answered %v, then %v", o, o2)
	}
	if delivered && sub.Get != nil {
		for _, u := range tr.Units {
			if !d.Served.Has(u.Name) {
				continue
			}
			got, ok := sub.Get(kitExtent, u.Name)
			if !ok || string(got) != string(u.Content) {
				return violation(RulePublishedContent, "unit (%d,%d): published, but reads back %v %x; staged %x", u.Group, u.Slot, ok, got, u.Content)
			}
		}
	}
	return nil
}

// sameOutcome reports whether two outcomes are the same answer.
func sameOutcome(x, y contract.Outcome) bool {
	switch a := x.(type) {
	case contract.Delivered:
		b, ok := y.(contract.Delivered)
		if !ok || a.Served.Len() != b.Served.Len() {
			return false
		}
		for n := range a.Served.All() {
			if !b.Served.Has(n) {
				return false
			}
		}
		return true
	default:
		return x == y
	}
}

// wrap returns t as rapid sees it: a failure file rapid writes under the
// package's testdata/rapid/ is moved into the kit's fail directory, and the
// message that names it says where it went.
func (c kitConfig) wrap(t TB) TB {
	if c.failDir == "" {
		return t
	}
	return &failFileTB{TB: t, dir: c.failDir}
}

type failFileTB struct {
	TB
	dir string
	mu  sync.Mutex
}

// Context is the test's context, where the test has one (rapid derives its
// own from it).
func (f *failFileTB) Context() context.Context {
	if c, ok := f.TB.(interface{ Context() context.Context }); ok {
		return c.Context()
	}
	return context.Background()
}

// failFileFlag matches the failure file rapid names in its report.
var failFileFlag = regexp.MustCompile(`-rapid\.failfile=("(?:[^"\\]|\\.)*")`)

func (f *failFileTB) Errorf(format string, args ...any) {
	f.Helper()
	f.TB.Errorf("%s", f.relocate(fmt.Sprintf(format, args...)))
}

func (f *failFileTB) Fatalf(format string, args ...any) {
	f.Helper()
	f.TB.Fatalf("%s", f.relocate(fmt.Sprintf(format, args...)))
}

// relocate moves the failure file msg names, if this process wrote it under
// testdata/rapid/, and rewrites msg to name the new place.
func (f *failFileTB) relocate(msg string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := failFileFlag.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	path, err := strconv.Unquote(msg[m[2]:m[3]])
	if err != nil || !strings.HasPrefix(filepath.ToSlash(path), "testdata/rapid/") ||
		!strings.HasSuffix(path, fmt.Sprintf("-%d.fail", os.Getpid())) {
		return msg // the user's own -rapid.failfile, or not rapid's default place
	}
	dest := filepath.Join(f.dir, filepath.Base(path))
	if err := moveFile(path, dest); err != nil {
		return msg + fmt.Sprintf("\n[kvready conformance] could not move the failure file to %s: %v", f.dir, err)
	}
	// Leave the package's testdata as it was: remove what is now empty.
	for dir := filepath.Dir(path); dir != "." && dir != string(filepath.Separator); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return msg[:m[2]] + strconv.Quote(dest) + msg[m[3]:]
}

func moveFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if os.Rename(from, to) == nil {
		return nil
	}
	data, err := os.ReadFile(from) // another file system: copy, then remove
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		return err
	}
	return os.Remove(from)
}
