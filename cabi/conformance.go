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
	"unsafe"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/proptest"
)

// rules names each rule of the conformance kit by a stable identifier, in the
// order the kit declares them.
var rules = []struct{ id, text string }{
	{"served_subset", proptest.RuleServedSubset},
	{"unserved_untouched", proptest.RuleUnservedUntouched},
	{"outside_untouched", proptest.RuleOutsideUntouched},
	{"served_content", proptest.RuleServedContent},
	{"stable", proptest.RuleStable},
	{"no_late_write", proptest.RuleNoLateWrite},
	{"known_miss", proptest.RuleKnownMiss},
	{"rejected_no_effect", proptest.RuleRejectedNoEffect},
	{"probe", proptest.RuleProbe},
	{"quiesce_cancelled", proptest.RuleQuiesceCancelled},
	{"attempt_or_error", proptest.RuleAttemptOrError},
	{"settle", proptest.RuleSettle},
	{"published_content", proptest.RulePublishedContent},
	{"publish_read_only", proptest.RulePublishReadOnly},
}

// brokenRule finds the rule a failed check reports ("conformance: RULE:
// detail"), or "" when the failure names none (a panic, a subject that could
// not be built).
func brokenRule(report string) string {
	for _, r := range rules {
		if strings.Contains(report, "conformance: "+r.text+":") {
			return r.id
		}
	}
	return ""
}

// conformanceMu serialises checks: rapid's settings are process-wide flags.
var conformanceMu sync.Mutex

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
	if checks > 0 {
		prev := flag.Lookup("rapid.checks").Value.String()
		_ = flag.Set("rapid.checks", strconv.Itoa(int(checks)))
		defer func() { _ = flag.Set("rapid.checks", prev) }()
	}
	var opts []proptest.Option
	if mayFail != 0 {
		opts = append(opts, proptest.MayFail())
	}
	// subject builds one backend over the kit's memory through the
	// embedder's make, and closes both after the trial.
	subject := func(m proptest.Memory) (*backend, func() error, error) {
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
		err = proptest.Run("kvready_conformance_check/fetch", func(t proptest.TB) {
			proptest.CheckFetcher(t, func(m proptest.Memory) (proptest.FetchSubject, error) {
				b, done, err := subject(m)
				if err != nil {
					return proptest.FetchSubject{}, err
				}
				if b.fetcher == nil || b.put == nil {
					_ = done()
					return proptest.FetchSubject{}, errors.New("the backend make_backend built cannot fetch and store (it needs fetch and put callbacks)")
				}
				return proptest.FetchSubject{Fetcher: b.fetcher, Close: done,
					Put: func(ext string, n contract.Name, row []byte) { _ = b.put(ext, n, row) }}, nil
			}, opts...)
		})
	} else {
		err = proptest.Run("kvready_conformance_check/publish", func(t proptest.TB) {
			proptest.CheckPublisher(t, func(m proptest.Memory) (proptest.PublishSubject, error) {
				b, done, err := subject(m)
				if err != nil {
					return proptest.PublishSubject{}, err
				}
				if b.publisher == nil {
					_ = done()
					return proptest.PublishSubject{}, errors.New("the backend make_backend built cannot publish (it needs a publish callback)")
				}
				sub := proptest.PublishSubject{Publisher: b.publisher, Close: done}
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
