package main

/*
#include "cgo.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net/url"
	"unsafe"

	"github.com/kvready/kvready/backend/tiers"
	"github.com/kvready/kvready/contract"
)

// maxTiers bounds the URLs of one kvready_backend_open_tiers: a stack is a
// handful of levels (LMCache's and Dynamo KVBM's have two to four); more is a
// caller's length gone wrong, refused before anything is opened.
const maxTiers = 16

//export kvready_backend_open_tiers
func kvready_backend_open_tiers(urls *C.kv_cstr, n C.size_t, memh C.uint64_t, out *C.uint64_t) (st C.int) {
	defer guard(0, &st)
	if urls == nil || out == nil {
		return fail(0, invalid("kvready_backend_open_tiers: urls and backend (the out-parameter) are required (NULL given)"))
	}
	if n == 0 || uint64(n) > maxTiers {
		return fail(0, invalid("kvready_backend_open_tiers: n %d; want 1 to %d tiers, first tier first", uint64(n), maxTiers))
	}
	m, err := lookup[*memory](uint64(memh), kindMemory)
	if err != nil {
		return fail(0, err)
	}
	raws := make([]string, n)
	for i, p := range unsafe.Slice(urls, int(n)) {
		if p == nil {
			return fail(0, invalid("kvready_backend_open_tiers: tier %d: its URL is NULL; want a URL as kvready_backend_open takes", i))
		}
		raws[i] = C.GoString((*C.char)(unsafe.Pointer(p)))
	}
	b, err := openTiers(raws, m)
	if err != nil {
		return fail(0, err)
	}
	b.mem = m
	m.users.Add(1)
	*out = C.uint64_t(register(kindBackend, b))
	return C.KVREADY_OK
}

// openTiers opens each URL as kvready_backend_open would, over m, and stacks
// them (backend/tiers), first URL first. A tier that fails to open fails the
// whole call with its own status, naming its index and URL, after closing
// the tiers already opened: nothing stays open.
func openTiers(raws []string, m *memory) (*backend, error) {
	var opened []*backend
	closeAll := func() error {
		var errs []error
		for i := len(opened) - 1; i >= 0; i-- {
			if err := opened[i].close(); err != nil {
				errs = append(errs, fmt.Errorf("tier %d (%s): %w", i, redacted(raws[i]), err))
			}
		}
		return errors.Join(errs...)
	}
	stack := make([]tiers.Tier, 0, len(raws))
	taken := map[string]bool{}
	for i, raw := range raws {
		t, err := openURL(raw, m)
		if err != nil {
			closed := closeAll()
			msg := fmt.Sprintf("kvready_backend_open_tiers: tier %d (%s): %v; nothing was opened", i, redacted(raw), err)
			if closed != nil {
				msg += fmt.Sprintf(" (closing the tiers before it: %v)", closed)
			}
			return nil, statusf(statusOf(err), "%s", msg)
		}
		opened = append(opened, t)
		stack = append(stack, tiers.Tier{Name: tierName(raw, i, taken), Fetcher: t.fetcher, Publisher: t.publisher})
	}
	tb, err := tiers.New(stack)
	if err != nil { // every tier opened has a name and both roles: a bug here
		_ = closeAll()
		return nil, invalid("kvready_backend_open_tiers: %v", err)
	}
	b := &backend{fetcher: tb, publisher: tb, tiers: tb}
	b.close = func() error {
		_ = tb.Close() // the stack's own goroutines first: none submits to a tier after this
		return closeAll()
	}
	b.put, b.get = tiersPut(opened), tiersGet(opened)
	return b, nil
}

// tierName names tier i by its URL's scheme ("mem", "redis", ...), which is
// what Stats, reasons and errors show; a scheme an earlier tier took gets
// "-i" added, since names are unique within a stack.
func tierName(raw string, i int, taken map[string]bool) string {
	name := "mem"
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		name = u.Scheme
	}
	if taken[name] {
		name = fmt.Sprintf("%s-%d", name, i)
	}
	taken[name] = true
	return name
}

// redacted is a URL as errors may show it: a password replaced by "xxxxx".
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Sprintf("%q", raw)
	}
	return u.Redacted()
}

// tiersPut stores a row in every tier that stores rows directly, as a
// publication writes through: the first tier that fails fails the put,
// naming it (the tiers before it keep the row, as a retried put overwrites
// it). No tier that stores: nil (kvready_backend_put is unsupported).
func tiersPut(ts []*backend) func(string, contract.Name, []byte) error {
	var some bool
	for _, t := range ts {
		some = some || t.put != nil
	}
	if !some {
		return nil
	}
	return func(ext string, n contract.Name, row []byte) error {
		for i, t := range ts {
			if t.put == nil {
				continue
			}
			if err := t.put(ext, n, row); err != nil {
				return fmt.Errorf("tier %d: %w", i, err)
			}
		}
		return nil
	}
}

// tiersGet reads a row back from the first tier, in order, that holds it, as
// a fetch asks the tiers.
func tiersGet(ts []*backend) func(string, contract.Name) ([]byte, bool, error) {
	var some bool
	for _, t := range ts {
		some = some || t.get != nil
	}
	if !some {
		return nil
	}
	return func(ext string, n contract.Name) ([]byte, bool, error) {
		for i, t := range ts {
			if t.get == nil {
				continue
			}
			v, ok, err := t.get(ext, n)
			if err != nil {
				return nil, false, fmt.Errorf("tier %d: %w", i, err)
			}
			if ok {
				return v, true, nil
			}
		}
		return nil, false, nil
	}
}

//export kvready_backend_tier_stats
func kvready_backend_tier_stats(h C.uint64_t, out *C.kvready_tier_stats, cap C.size_t, n *C.size_t) (st C.int) {
	defer guard(uint64(h), &st)
	b, err := lookup[*backend](uint64(h), kindBackend)
	if err != nil {
		return fail(uint64(h), err)
	}
	if b.tiers == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_UNSUPPORTED, "kvready_backend_tier_stats: this backend has no tiers; want one opened by kvready_backend_open_tiers"))
	}
	stats := b.tiers.Stats()
	if n != nil {
		*n = C.size_t(len(stats))
	}
	if !fits(cap, len(stats)) || out == nil {
		return fail(uint64(h), statusf(C.KVREADY_ERR_BUFFER, "kvready_backend_tier_stats: %d tiers; the array holds %d (stats NULL: %v)", len(stats), uint64(cap), out == nil))
	}
	dst := outView(out, cap, len(stats))
	for i, s := range stats {
		dst[i] = tierStatsToC(s)
	}
	return C.KVREADY_OK
}

// tierStatsToC is one tier's counters as kvready_tier_stats carries them:
// every field of tiers.TierStats in the field of its name in snake case
// (TestEveryTierCounterReachesC).
func tierStatsToC(s tiers.TierStats) C.kvready_tier_stats {
	var out C.kvready_tier_stats
	cArray(out.name[:], s.Name)
	out.handed, out.hits, out.misses, out.failed = C.uint64_t(s.Handed), C.uint64_t(s.Hits), C.uint64_t(s.Misses), C.uint64_t(s.Failed)
	out.published, out.publish_failed = C.uint64_t(s.Published), C.uint64_t(s.PublishFailed)
	out.promoted, out.promote_failed, out.promote_skipped = C.uint64_t(s.Promoted), C.uint64_t(s.PromoteFailed), C.uint64_t(s.PromoteSkipped)
	out.rejected, out.no_outcome, out.violations = C.uint64_t(s.Rejected), C.uint64_t(s.NoOutcome), C.uint64_t(s.Violations)
	out.cancel_errors, out.evictions = C.uint64_t(s.CancelErrors), C.uint64_t(s.Evictions)
	out.bytes, out.sized = C.int64_t(s.Bytes), cbool(s.Sized)
	return out
}
