package redis_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	kvredis "github.com/kvready/kvready/backend/redis"
	"github.com/kvready/kvready/conformance"
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/internal/redistest"
)

// The conformance kit (conformance.CheckFetcher, conformance.CheckPublisher) runs
// against a real server: RAPID_CHECKS trials each, one fresh backend per
// trial over one client, its keys kept apart by a prefix of its own. The kit's
// bound on Settle and Quiesce and the backend's timeout are both a minute, so
// a slow machine makes a trial slow, never a failure.

func kitSubjects(t *testing.T, client goredis.UniversalClient) (conformance.NewFetcher, conformance.NewPublisher) {
	return kitSubjectsOf(t, func(mem conformance.Memory) (*kvredis.Backend, error) {
		return kvredis.New(client, mem, kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithTimeout(wait))
	})
}

// kitOpened are the kit's subjects opened from url as a deployment opens
// them: Open's clients, its publications one MSETNX a run of names.
func kitOpened(t *testing.T, url string) (conformance.NewFetcher, conformance.NewPublisher) {
	return kitSubjectsOf(t, func(mem conformance.Memory) (*kvredis.Backend, error) {
		return kvredis.Open(context.Background(), url, mem, kvredis.WithPrefix(uniquePrefix(t)), kvredis.WithTimeout(wait))
	})
}

func kitSubjectsOf(t *testing.T, build func(conformance.Memory) (*kvredis.Backend, error)) (conformance.NewFetcher, conformance.NewPublisher) {
	fetcher := func(mem conformance.Memory) (conformance.FetchSubject, error) {
		b, err := build(mem)
		if err != nil {
			return conformance.FetchSubject{}, err
		}
		put := func(extent string, n contract.Name, row []byte) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			if err := b.Put(ctx, extent, n, row); err != nil {
				t.Errorf("seeding the store: %v", err)
			}
		}
		return conformance.FetchSubject{Fetcher: b, Put: put, Close: b.Close}, nil
	}
	publisher := func(mem conformance.Memory) (conformance.PublishSubject, error) {
		b, err := build(mem)
		if err != nil {
			return conformance.PublishSubject{}, err
		}
		get := func(extent string, n contract.Name) ([]byte, bool) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			v, ok, err := b.Get(ctx, extent, n)
			if err != nil {
				t.Errorf("reading the store back: %v", err)
			}
			return v, ok
		}
		return conformance.PublishSubject{Publisher: b, Get: get, Close: b.Close}, nil
	}
	return fetcher, publisher
}

// kitWait is the kit's bound on each Settle and Quiesce: long enough for a
// loaded machine.
var kitWait = conformance.Wait(wait)

func TestConformanceFetcher(t *testing.T) {
	f, _ := kitSubjects(t, newClient(t, shared.Addr))
	conformance.CheckFetcher(t, f, kitWait)
}

func TestConformancePublisher(t *testing.T) {
	_, p := kitSubjects(t, newClient(t, shared.Addr))
	conformance.CheckPublisher(t, p, kitWait)
}

// TestConformancePublisherOpened: the same over Open, whose publications
// go as MSETNX where New's go as SET NX.
func TestConformancePublisherOpened(t *testing.T) {
	_, p := kitOpened(t, shared.URL())
	conformance.CheckPublisher(t, p, kitWait)
}

func clusterClient(t testing.TB, c *redistest.Cluster) *goredis.ClusterClient {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func TestConformanceFetcherCluster(t *testing.T) {
	f, _ := kitSubjects(t, clusterClient(t, sharedCluster(t)))
	conformance.CheckFetcher(t, f, kitWait)
}

func TestConformancePublisherCluster(t *testing.T) {
	_, p := kitSubjects(t, clusterClient(t, sharedCluster(t)))
	conformance.CheckPublisher(t, p, kitWait)
}
