package tiers_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/mem"
	"github.com/kvready/kvready/backend/mem/memtest"
	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/conformance"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

// kitWait bounds the kit's Settle and Quiesce, and the redis tier's attempt:
// generous, so that a loaded machine makes a trial slow, never a failure.
const kitWait = time.Minute

var trialSeq atomic.Uint64

// redisStack builds, per trial, a bounded backend/mem tier in front of a
// backend/redis tier over a real redis-server (keys kept apart per trial).
// The kit's Put seeds the shared tier, and the local one for half the names,
// so that trials meet local hits, shared hits with promotion, and misses.
func redisStack(t *testing.T) (conformance.NewFetcher, conformance.NewPublisher) {
	srv := redistest.Start(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	build := func(m conformance.Memory) (*tiers.Backend, *mem.Backend, *kvredis.Backend, func() error, error) {
		local, err := mem.New(m, mem.WithCapacityBytes(1<<10))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		shared, err := kvredis.New(client, m, kvredis.WithPrefix(fmt.Sprintf("tiers:%d:", trialSeq.Add(1))), kvredis.WithAttemptTimeout(kitWait))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		b, err := tiers.New([]tiers.Tier{{Name: "local", Fetcher: local, Publisher: local}, {Name: "redis", Fetcher: shared, Publisher: shared}},
			tiers.WithWait(kitWait))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		closeAll := func() error { _ = b.Close(); _ = local.Close(); return shared.Close() }
		return b, local, shared, closeAll, nil
	}
	fetcher := func(m conformance.Memory) (conformance.FetchSubject, error) {
		b, local, shared, closeAll, err := build(m)
		if err != nil {
			return conformance.FetchSubject{}, err
		}
		put := func(extent string, n contract.Name, row []byte) {
			ctx, cancel := context.WithTimeout(context.Background(), kitWait)
			defer cancel()
			if err := shared.Put(ctx, extent, n, row); err != nil {
				t.Errorf("seeding redis: %v", err)
			}
			if n[3]%2 == 0 {
				local.Put(extent, n, row)
			}
		}
		return conformance.FetchSubject{Fetcher: b, Put: put, Close: closeAll}, nil
	}
	publisher := func(m conformance.Memory) (conformance.PublishSubject, error) {
		b, _, shared, closeAll, err := build(m)
		if err != nil {
			return conformance.PublishSubject{}, err
		}
		get := func(extent string, n contract.Name) ([]byte, bool) {
			ctx, cancel := context.WithTimeout(context.Background(), kitWait)
			defer cancel()
			v, ok, err := shared.Get(ctx, extent, n) // the shared tier is what other managers read
			if err != nil {
				t.Errorf("reading redis back: %v", err)
			}
			return v, ok
		}
		return conformance.PublishSubject{Publisher: b, Get: get, Close: closeAll}, nil
	}
	return fetcher, publisher
}

// TestConformanceMemInFrontOfRedis: the kit passes the stack built from
// backend/mem and backend/redis over a real redis-server.
func TestConformanceMemInFrontOfRedis(t *testing.T) {
	f, p := redisStack(t)
	t.Run("fetcher", func(t *testing.T) { conformance.CheckFetcher(t, f, conformance.Wait(kitWait)) })
	t.Run("publisher", func(t *testing.T) { conformance.CheckPublisher(t, p, conformance.Wait(kitWait)) })
}

// faultyStack is a stack of two in-memory tiers, one of them broken on
// purpose (memtest), the kit's Put seeding the tiers listed in seed.
func faultyStack(faultTier int, fault memtest.Fault, seed ...int) conformance.NewFetcher {
	return func(m conformance.Memory) (conformance.FetchSubject, error) {
		var ts []tiers.Tier
		var puts []func(string, contract.Name, []byte)
		var closers []func() error
		for i, nm := range []string{"local", "shared"} {
			var st storeAPI
			var err error
			if i == faultTier {
				st, err = memtest.New(m, fault)
			} else {
				st, err = mem.New(m)
			}
			if err != nil {
				return conformance.FetchSubject{}, err
			}
			ts = append(ts, tiers.Tier{Name: nm, Fetcher: st, Publisher: st})
			closers = append(closers, st.Close)
			for _, s := range seed {
				if s == i {
					puts = append(puts, st.Put)
				}
			}
		}
		b, err := tiers.New(ts, tiers.WithoutPromotion())
		if err != nil {
			return conformance.FetchSubject{}, err
		}
		put := func(extent string, n contract.Name, row []byte) {
			for _, p := range puts {
				p(extent, n, row)
			}
		}
		closeAll := func() error {
			_ = b.Close()
			for _, c := range closers {
				_ = c()
			}
			return nil
		}
		return conformance.FetchSubject{Fetcher: b, Put: put, Close: closeAll}, nil
	}
}

// TestConformanceNamesTheTierAtFault (rule 15): when one tier breaks a rule,
// the kit's report on the stack names it. A local tier that writes after its
// proof is the only accessor of the rows it served; a shared tier that
// writes rows it did not serve shares them with the local tier that missed
// them, and the report names both with what each answered.
func TestConformanceNamesTheTierAtFault(t *testing.T) {
	tests := []struct {
		name     string
		fetcher  conformance.NewFetcher
		rule     string
		names    []string
		notNamed string
	}{
		{name: "a local tier writes after its proof",
			fetcher: faultyStack(0, memtest.WriteAfterQuiesce, 0),
			rule:    conformance.RuleNoLateWrite, names: []string{`tier 0 "local" fetch: served`}, notNamed: `"shared"`},
		{name: "a shared tier writes rows it did not serve",
			fetcher: faultyStack(1, memtest.WriteUnserved, 1),
			rule:    conformance.RuleUnservedUntouched, names: []string{`tier 1 "shared" fetch: not served`, `tier 0 "local" fetch: not served`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := conformance.Run(t.Name(), func(kt conformance.TB) {
				conformance.CheckFetcher(kt, tt.fetcher, conformance.WatchOneIn(1), conformance.FailFiles(t.TempDir()))
			})
			require.Error(t, err, "the kit passed a stack with a broken tier")
			msg := err.Error()
			t.Log(msg)
			assert.Contains(t, msg, tt.rule)
			for _, n := range tt.names {
				assert.Contains(t, msg, n)
			}
			if tt.notNamed != "" {
				assert.NotContains(t, msg, tt.notNamed)
			}
		})
	}
}
