package readiness

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/readiness/core"
	"github.com/kvready/kvready/staging"
)

// fill sets every settable field of v, recursively, to a value derived from
// *n (counting up), so that a conversion that drops or swaps a field shows.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(int64(*n), 0)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), n)
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			fill(t, v.Index(i), n)
		}
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint8, reflect.Uint64:
		v.SetUint(uint64(*n % 200))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.String:
		v.SetString(fmt.Sprint("s", *n))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), n)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	default:
		t.Fatalf("fill: a %v field; teach fill its kind", v.Type())
	}
}

// sameFields checks that every exported field of want has a field of the
// same name in got holding the same value, recursing into structs whose types
// differ (the core's and this package's), and that got has no other field.
func sameFields(t *testing.T, path string, want, got reflect.Value) {
	t.Helper()
	if want.Kind() == reflect.Struct && want.Type() != got.Type() && want.Type() != reflect.TypeFor[time.Time]() {
		require.Equal(t, reflect.Struct, got.Kind(), "%s", path)
		exported := 0
		for i := range want.NumField() {
			f := want.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			exported++
			g := got.FieldByName(f.Name)
			if assert.True(t, g.IsValid(), "%s.%s has no counterpart", path, f.Name) {
				sameFields(t, path+"."+f.Name, want.Field(i), g)
			}
		}
		n := 0
		for i := range got.NumField() {
			if got.Type().Field(i).IsExported() {
				n++
			}
		}
		assert.Equal(t, exported, n, "%s: fields", path)
		return
	}
	if h, ok := want.Interface().(core.Handle); ok {
		assert.Equal(t, h.Uint64(), got.Interface().(Handle).Uint64(), "%s", path)
		return
	}
	if want.Type().ConvertibleTo(got.Type()) {
		assert.Equal(t, want.Convert(got.Type()).Interface(), got.Interface(), "%s", path)
		return
	}
	t.Errorf("%s: %v and %v cannot be compared", path, want.Type(), got.Type())
}

// The runner's vocabulary is the core's, field for field: a counter, a
// lease's description or a containment that the copy dropped would read as
// zero to an embedder.
func TestConversionsCopyEveryField(t *testing.T) {
	for _, tc := range []struct {
		name    string
		from    any
		convert func(any) any
	}{
		{"Stats", core.Stats{}, func(v any) any { s := v.(core.Stats); return stats(&s) }},
		{"LeaseInfo", core.LeaseInfo{}, func(v any) any { return leaseInfo(v.(core.LeaseInfo)) }},
		{"Containment", core.Containment{}, func(v any) any { return containment(v.(core.Containment)) }},
		{"GroupSlots", core.GroupSlots{}, func(v any) any { return GroupSlots(v.(core.GroupSlots)) }},
		{"InFlight", core.InFlight{}, func(v any) any { return InFlight(v.(core.InFlight)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := reflect.New(reflect.TypeOf(tc.from)).Elem()
			n := 0
			fill(t, from, &n)
			if h := from.FieldByName("Handle"); h.IsValid() {
				h.Set(reflect.ValueOf(core.HandleOf(7<<32 | 3)))
			}
			if h := from.FieldByName("Lease"); h.IsValid() && h.Type() == reflect.TypeFor[core.Handle]() {
				h.Set(reflect.ValueOf(core.HandleOf(7<<32 | 3)))
			}
			sameFields(t, tc.name, from, reflect.ValueOf(tc.convert(from.Interface())))
		})
	}
}

// A transition names its lease, its states, what caused it and what it
// latched, as the core's step does.
func TestTransitionIsTheCoresStep(t *testing.T) {
	step := fsm.Step{From: fsm.Requested, To: fsm.Served, Event: fsm.OutcomeServed, Result: fsm.Delivered}
	tr := transition(core.Transition{Lease: core.HandleOf(2<<32 | 5), Step: step})
	assert.Equal(t, Transition{Lease: HandleOf(2<<32 | 5), From: State(fsm.Requested), To: State(fsm.Served),
		Cause: core.Cause(step), Outcome: Served}, tr)
	assert.Equal(t, step.Cause(), CauseName(tr.Cause))
	done := fsm.Step{From: fsm.Granted, To: fsm.Staged, Completion: true, Guard: fsm.IsFetch}
	assert.Equal(t, done.Cause(), CauseName(transition(core.Transition{Step: done}).Cause))
}

// Every field of the core's config is a field of the flat Config, under the
// same name, and reaches the core unchanged.
func TestConfigIsTheCoresFlattened(t *testing.T) {
	var cfg Config
	v := reflect.ValueOf(&cfg).Elem()
	cc := reflect.TypeFor[core.Config]()
	n := 0
	for i := range cc.NumField() {
		f := cc.Field(i)
		mine := v.FieldByName(f.Name)
		if !assert.True(t, mine.IsValid(), "core.Config.%s is not a field of Config", f.Name) {
			continue
		}
		if f.Type.Kind() != reflect.Func {
			fill(t, mine, &n)
		}
	}
	cfg.Memory, cfg.Logger = &staging.Memory{}, slog.Default()
	var moved []Transition
	cfg.OnTransition = func(tr Transition) { moved = append(moved, tr) }
	got := cfg.core()
	want := reflect.ValueOf(got)
	for i := range cc.NumField() {
		f := cc.Field(i)
		if f.Type.Kind() == reflect.Func {
			continue
		}
		sameFields(t, "Config."+f.Name, want.Field(i), v.FieldByName(f.Name))
	}
	require.NotNil(t, got.OnTransition)
	got.OnTransition(core.Transition{Lease: core.HandleOf(1<<32 | 2), Step: fsm.Step{From: fsm.Waiting, To: fsm.Granted}})
	assert.Equal(t, []Transition{{Lease: HandleOf(1<<32 | 2), From: State(fsm.Waiting), To: State(fsm.Granted)}}, moved)
	cfg.OnTransition = nil
	assert.Nil(t, cfg.core().OnTransition, "no tracing costs no call")
}

// A State's groups are the table's, for every state and one past them.
func TestStateGroupsAreTheTables(t *testing.T) {
	tab := fsm.Lifecycle()
	for s := range fsm.NumStates + 1 {
		st := State(s)
		assert.Equal(t, s.String(), st.String())
		assert.Equal(t, tab.Holding(s), st.Held(), "%v held", s)
		assert.Equal(t, tab.Exposed(s), st.Exposed(), "%v exposed", s)
		assert.Equal(t, tab.Answerable(s), st.Answerable(), "%v answerable", s)
		assert.Equal(t, tab.Pending(s), st.Pending(), "%v pending", s)
		assert.Equal(t, s.Terminal(), st.Terminal(), "%v terminal", s)
	}
	assert.True(t, State(fsm.Quarantined).Terminal() && State(fsm.Released).Terminal())
	assert.True(t, State(fsm.LogicallyComplete).Answerable())
	assert.False(t, State(fsm.Quarantined).Answerable(), "a quarantined lease's rows are not usable")
	assert.Equal(t, NumStates, int(fsm.NumStates))
	assert.Equal(t, NumOutcomes, int(fsm.NumResults))
	for r := range fsm.NumResults {
		assert.Equal(t, r.String(), OutcomeKind(r).String())
		assert.Equal(t, r.Failure(), OutcomeKind(r).Failure())
	}
	assert.False(t, Missed.Failure(), "a miss is never a failure")
}

// The vocabulary's values are the core's: a kind, a policy or a handle
// crosses the boundary unchanged, and prints as the core's does.
func TestVocabularyIsTheCores(t *testing.T) {
	for _, k := range []Kind{Fetch, Publish, 0, 9} {
		assert.Equal(t, core.Kind(k).String(), k.String())
	}
	for _, p := range []Policy{Quarantine, Fatal, Recover, 7} {
		assert.Equal(t, core.Policy(p).String(), p.String())
	}
	for _, name := range []string{"quarantine", "fatal", "recover"} {
		p, err := ParsePolicy(name)
		require.NoError(t, err)
		assert.Equal(t, name, p.String())
	}
	_, err := ParsePolicy("lenient")
	assert.ErrorContains(t, err, `"lenient"; want quarantine, fatal or recover`)
	h := HandleOf(3<<32 | 9)
	assert.Equal(t, uint64(3<<32|9), h.Uint64())
	assert.Equal(t, 9, h.Index())
	assert.Equal(t, "lease#9.3", h.String())
	assert.False(t, h.IsZero())
	assert.True(t, Handle{}.IsZero())
	assert.Equal(t, uint64(0), Handle{}.Uint64())
}

// A halt reads in this package's terms: ErrHalted wrapping an
// *InvariantError or a *FatalError that names the lease, with the core's
// words.
func TestHaltErrorSpeaksTheEnginesTerms(t *testing.T) {
	lease := core.HandleOf(4<<32 | 1)
	ie := &core.InvariantError{What: "freed unfenced slots", Lease: lease}
	got := haltError(fmt.Errorf("%w: %w", core.ErrHalted, ie))
	require.ErrorIs(t, got, ErrHalted)
	var mine *InvariantError
	require.ErrorAs(t, got, &mine)
	assert.Equal(t, InvariantError{What: "freed unfenced slots", Lease: HandleOf(4<<32 | 1)}, *mine)
	assert.Equal(t, ie.Error(), mine.Error())

	c := core.Containment{Lease: lease, Slots: 2, Reason: "access unproven", Deadline: time.Unix(9, 0)}
	fe := &core.FatalError{Containment: c}
	got = haltError(fmt.Errorf("%w: %w", core.ErrHalted, fe))
	require.ErrorIs(t, got, ErrHalted)
	var fatal *FatalError
	require.ErrorAs(t, got, &fatal)
	assert.Equal(t, containment(c), fatal.Containment)
	assert.Equal(t, fe.Error(), fatal.Error())

	other := errors.New("something else")
	assert.Equal(t, other, haltError(other), "an error that is neither passes as it is")
}
