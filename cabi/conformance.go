//go:build kvready_testkit

package main

/*
#include "cgo.h"
*/
import "C"

import (
	"errors"
	"flag"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/kvready/kvready/conformance"
	"github.com/kvready/kvready/contract"
)

// rules names each rule of the conformance kit by a stable identifier, in the
// order the kit declares them. The identifiers are the ABI's (kvready.h lists
// them): a rule's text may change, its identifier never does.
var rules = []struct{ id, text string }{
	{"served_subset", conformance.RuleServedSubset},
	{"unserved_untouched", conformance.RuleUnservedUntouched},
	{"outside_untouched", conformance.RuleOutsideUntouched},
	{"served_content", conformance.RuleServedContent},
	{"stable", conformance.RuleStable},
	{"no_late_write", conformance.RuleNoLateWrite},
	{"known_miss", conformance.RuleKnownMiss},
	{"rejected_no_effect", conformance.RuleRejectedNoEffect},
	{"probe", conformance.RuleProbe},
	{"quiesce_cancelled", conformance.RuleQuiesceCancelled},
	{"attempt_or_error", conformance.RuleAttemptOrError},
	{"settle", conformance.RuleSettle},
	{"published_content", conformance.RulePublishedContent},
	{"publish_read_only", conformance.RulePublishReadOnly},
	{"cancel_never_blocks", conformance.RuleCancelNeverBlocks},
	{"cancel_answer", conformance.RuleCancelAnswer},
	{"cancel_idempotent", conformance.RuleCancelIdempotent},
	{"cancel_no_new_access", conformance.RuleCancelNoNewAccess},
	{"cancel_keeps_proof", conformance.RuleCancelKeepsProof},
	{"cancel_not_end", conformance.RuleCancelNotEnd},
	{"completion_once", conformance.RuleCompletionOnce},
	{"probe_never_blocks", conformance.RuleProbeNeverBlocks},
	{"probe_agrees", conformance.RuleProbeAgrees},
}

// brokenRule finds the rule a failed check reports ("conformance: RULE:
// detail"), or "" when the failure names none (a panic, a subject that could
// not be built). rapid's verdict comes first in the report, before the
// trials' own output: the earliest rule named is the verdict's.
func brokenRule(report string) string {
	best, at := "", len(report)
	for _, r := range rules {
		if i := strings.Index(report, "conformance: "+r.text+":"); i >= 0 && i < at {
			best, at = r.id, i
		}
	}
	return best
}

// conformanceMu serialises checks: rapid's settings are process-wide flags.
var conformanceMu sync.Mutex

// flagsOnce readies the flags rapid reads: rapid asks testing.Short, which
// needs testing's flags registered and parsed. They are parsed from no
// arguments — never the host process's own command line. Only the test
// library (libkvready_testkit.so) holds this: libkvready.so links neither
// testing nor flag (TestShippedBinariesLinkNoTestCode).
var flagsOnce sync.Once

func readyFlags() {
	flagsOnce.Do(func() {
		testing.Init()
		if !flag.Parsed() {
			_ = flag.CommandLine.Parse(nil)
		}
	})
}

//export kvready_conformance_check
func kvready_conformance_check(mk C.kvready_make_backend, user unsafe.Pointer, kind, checks, mayFail C.int32_t, rule *C.char, ruleCap C.size_t) (st C.int) {
	defer guard(0, &st)
	if mk == nil {
		return fail(0, invalid("kvready_conformance_check: make is NULL; want a function that builds a backend over the kit's memory"))
	}
	if kind != C.KVREADY_FETCH && kind != C.KVREADY_PUBLISH {
		return fail(0, invalid("kvready_conformance_check: kind %d; want KVREADY_FETCH (1) or KVREADY_PUBLISH (2)", int(kind)))
	}
	if checks < 0 {
		return fail(0, invalid("kvready_conformance_check: checks %d; want 0 (the default) or more", int(checks)))
	}
	conformanceMu.Lock()
	defer conformanceMu.Unlock()
	readyFlags()
	if checks > 0 {
		prev := flag.Lookup("rapid.checks").Value.String()
		_ = flag.Set("rapid.checks", strconv.Itoa(int(checks)))
		defer func() { _ = flag.Set("rapid.checks", prev) }()
	}
	// Shrinking a failure re-runs trials through the embedder's callbacks:
	// bound it, so a broken backend is reported in seconds.
	prevShrink := flag.Lookup("rapid.shrinktime").Value.String()
	_ = flag.Set("rapid.shrinktime", "5s")
	defer func() { _ = flag.Set("rapid.shrinktime", prevShrink) }()
	var opts []conformance.Option
	if mayFail != 0 {
		opts = append(opts, conformance.MayFail())
	}
	// subject builds one backend over the kit's memory through the
	// embedder's make, and closes both after the trial.
	subject := func(m conformance.Memory) (*backend, func() error, error) {
		mh := register(kindMemory, &memory{rows: m})
		var bh C.uint64_t
		if s := C.kv_make(mk, user, C.uint64_t(mh), &bh); s != C.KVREADY_OK {
			unregister(mh)
			return nil, nil, errors.New("the embedder's make_backend failed with status " + strconv.Itoa(int(s)))
		}
		b, err := lookup[*backend](uint64(bh), kindBackend)
		if err != nil {
			unregister(mh)
			return nil, nil, err
		}
		done := func() error {
			unregister(uint64(bh))
			err := b.shut()
			unregister(mh)
			return err
		}
		return b, done, nil
	}
	var err error
	if kind == C.KVREADY_FETCH {
		err = conformance.Run("kvready_conformance_check/fetch", func(t conformance.TB) {
			conformance.CheckFetcher(t, func(m conformance.Memory) (conformance.FetchSubject, error) {
				b, done, err := subject(m)
				if err != nil {
					return conformance.FetchSubject{}, err
				}
				if b.fetcher == nil || b.put == nil {
					_ = done()
					return conformance.FetchSubject{}, errors.New("the backend make_backend built cannot fetch and store (it needs fetch and put callbacks)")
				}
				return conformance.FetchSubject{Fetcher: b.fetcher, Close: done,
					Put: func(ext string, n contract.Name, row []byte) { _ = b.put(ext, n, row) }}, nil
			}, opts...)
		})
	} else {
		err = conformance.Run("kvready_conformance_check/publish", func(t conformance.TB) {
			conformance.CheckPublisher(t, func(m conformance.Memory) (conformance.PublishSubject, error) {
				b, done, err := subject(m)
				if err != nil {
					return conformance.PublishSubject{}, err
				}
				if b.publisher == nil {
					_ = done()
					return conformance.PublishSubject{}, errors.New("the backend make_backend built cannot publish (it needs a publish callback)")
				}
				sub := conformance.PublishSubject{Publisher: b.publisher, Close: done}
				if b.get != nil {
					sub.Get = func(ext string, n contract.Name) ([]byte, bool) {
						v, ok, err := b.get(ext, n)
						return v, ok && err == nil
					}
				}
				return sub, nil
			}, opts...)
		})
	}
	if err == nil {
		cString(rule, ruleCap, "")
		return C.KVREADY_OK
	}
	cString(rule, ruleCap, brokenRule(err.Error()))
	return fail(0, statusf(C.KVREADY_ERR_CONFORMANCE, "%v", err))
}
