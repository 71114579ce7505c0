package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/contract"
)

// capBehaviour is how a wrapped backend/mem breaks the optional
// capabilities the engine relies on.
type capBehaviour struct {
	probeBlocks     bool // TryQuiesce waits until the backend is closed
	probeEnded      bool // TryQuiesce answers ended, whatever Quiesce says
	probeUnproven   bool // TryQuiesce answers unproven, even after the proof
	completeTwice   bool // the completion is called twice
	completeAtOnce  bool // the completion is called when Notify is, before the outcome
	quiesceNotTrue  bool // Quiesce never answers true (with probeEnded: a contradiction)
	completeNothing bool // the completion is never called
}

// capBackend is backend/mem with its probe and its attempts' completions
// replaced as capBehaviour says.
type capBackend struct {
	*mem.Backend
	b      *capBehaviour
	closed chan struct{}
	once   sync.Once
}

type capAttempt struct {
	contract.Attempt
	b *capBehaviour
}

func (a capAttempt) Notify(f func()) {
	switch {
	case a.b.completeNothing:
	case a.b.completeAtOnce:
		f()
	case a.b.completeTwice:
		a.Attempt.(contract.Notifier).Notify(func() { f(); f() })
	default:
		a.Attempt.(contract.Notifier).Notify(f)
	}
}

func (c *capBackend) wrap(a contract.Attempt, err error) (contract.Attempt, error) {
	if a == nil {
		return nil, err
	}
	return capAttempt{a, c.b}, err
}

func (c *capBackend) Fetch(ext contract.CacheExtent, r contract.Route) (contract.Attempt, error) {
	return c.wrap(c.Backend.Fetch(ext, r))
}

func (c *capBackend) Publish(ext contract.CacheExtent) (contract.Attempt, error) {
	return c.wrap(c.Backend.Publish(ext))
}

func unwrapCap(list []contract.Attempt) []contract.Attempt {
	inner := make([]contract.Attempt, len(list))
	for i, a := range list {
		inner[i] = a.(capAttempt).Attempt
	}
	return inner
}

func (c *capBackend) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	if c.b.quiesceNotTrue {
		return false, nil
	}
	return c.Backend.Quiesce(ctx, unwrapCap(list))
}

func (c *capBackend) Settle(ctx context.Context, list []contract.Attempt) error {
	return c.Backend.Settle(ctx, unwrapCap(list))
}

func (c *capBackend) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	switch {
	case c.b.probeBlocks:
		<-c.closed
		return contract.AccessUnknown, nil
	case c.b.probeEnded:
		return contract.AccessEnded, nil
	case c.b.probeUnproven:
		return contract.AccessUnproven, nil
	}
	return c.Backend.TryQuiesce(unwrapCap(list))
}

func (c *capBackend) close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Backend.Close()
}

func capFetcher(b *capBehaviour) NewFetcher {
	return func(m Memory) (FetchSubject, error) {
		inner, err := mem.New(m)
		if err != nil {
			return FetchSubject{}, err
		}
		c := &capBackend{Backend: inner, b: b, closed: make(chan struct{})}
		return FetchSubject{Fetcher: c, Put: inner.Put, Close: c.close}, nil
	}
}

func capPublisher(b *capBehaviour) NewPublisher {
	return func(m Memory) (PublishSubject, error) {
		inner, err := mem.New(m)
		if err != nil {
			return PublishSubject{}, err
		}
		c := &capBackend{Backend: inner, b: b, closed: make(chan struct{})}
		return PublishSubject{Publisher: c, Get: inner.Get, Close: c.close}, nil
	}
}

// Each broken completion or probe is caught under its rule, fetch and
// publish; the honest capabilities (backend/mem's own) pass.
func TestKitCapabilities(t *testing.T) {
	cfg := newConfig([]Option{CallBound(20 * time.Millisecond), Wait(200 * time.Millisecond)})
	for _, tc := range []struct {
		name string
		b    capBehaviour
		rule string
	}{
		{"completion called twice", capBehaviour{completeTwice: true}, RuleCompletionOnce},
		{"completion before the outcome", capBehaviour{completeAtOnce: true}, RuleCompletionOnce},
		{"completion never called", capBehaviour{completeNothing: true}, RuleCompletionOnce},
		{"probe blocks", capBehaviour{probeBlocks: true}, RuleProbeNeverBlocks},
		{"probe says ended, Quiesce never true", capBehaviour{probeEnded: true, quiesceNotTrue: true}, RuleProbeAgrees},
		{"probe says unproven after the proof", capBehaviour{probeUnproven: true}, RuleProbeAgrees},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fetch := rulesReported(t, tc.rule, func(tr trial) error { return fetchTrial(capFetcher(&tc.b), tr, cfg) })
			assert.Positive(t, fetch[tc.rule], "fetch: %q never reported: %v", tc.rule, fetch)
			publish := rulesReported(t, tc.rule, func(tr trial) error { return publishTrial(capPublisher(&tc.b), tr, cfg) })
			assert.Positive(t, publish[tc.rule], "publish: %q never reported: %v", tc.rule, publish)
		})
	}
	t.Run("honest", func(t *testing.T) {
		honest := &capBehaviour{}
		assert.Empty(t, rulesReported(t, "", func(tr trial) error { return fetchTrial(capFetcher(honest), tr, cfg) }))
		assert.Empty(t, rulesReported(t, "", func(tr trial) error { return publishTrial(capPublisher(honest), tr, cfg) }))
	})
}

// A probe that says access ended before a delivery's last write is caught:
// Quiesce, asked right after, cannot agree while the delivery is held, and
// the memory is watched from the probe's answer on.
func TestKitWatchesMemoryFromAProbesProof(t *testing.T) {
	err := Run("early-probe", func(tb TB) {
		CheckFetcher(tb, func(m Memory) (FetchSubject, error) {
			gate := make(chan struct{})
			var once sync.Once
			inner, err := mem.New(m, mem.WithGate(func(mem.Call) <-chan struct{} { return gate }))
			if err != nil {
				return FetchSubject{}, err
			}
			c := &capBackend{Backend: inner, b: &capBehaviour{probeEnded: true}, closed: make(chan struct{})}
			return FetchSubject{Fetcher: settleOpens{c, gate, &once}, Put: inner.Put, Close: func() error {
				once.Do(func() { close(gate) })
				return c.close()
			}}, nil
		}, FailFiles(t.TempDir()), Wait(100*time.Millisecond))
	})
	require.Error(t, err)
	assert.Regexp(t, "conformance: ("+RuleProbeAgrees+"|"+RuleNoLateWrite+")", err.Error())
}

// settleOpens opens a gated delivery when Settle is called, so that the
// write lands after the probe's early "ended".
type settleOpens struct {
	*capBackend
	gate chan struct{}
	once *sync.Once
}

func (s settleOpens) Settle(ctx context.Context, list []contract.Attempt) error {
	s.once.Do(func() { close(s.gate) })
	return s.capBackend.Settle(ctx, list)
}
