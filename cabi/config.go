package main

/*
#include "cgo.h"
*/
import "C"

import (
	"time"

	"github.com/kvready/kvready/readiness"
)

// setting is one readiness.Config field that kvready_engine_config carries:
// its name on each side and how its value crosses each way.
type setting struct {
	name  string // the readiness.Config field
	cname string // the kvready_engine_config field
	toGo  func(*C.kvready_engine_config, *readiness.Config) error
	toC   func(*readiness.Config, *C.kvready_engine_config)
}

// settings is every setting of readiness.Config that crosses into C, each
// once: kvready_engine_new reads them (settingsFromC), and
// kvready_engine_config_defaults writes readiness.Defaults() through them.
// A Config field that is not here is listed, with its reason, in
// TestEveryConfigFieldCrossesIntoC, which fails for a field in neither.
var settings = []setting{
	count("TokensPerBlock", "tokens_per_block",
		func(r *readiness.Config) *int { return &r.TokensPerBlock }, func(c *C.kvready_engine_config) *C.int32_t { return &c.tokens_per_block }),
	count("QuiesceWorkers", "quiesce_workers",
		func(r *readiness.Config) *int { return &r.QuiesceWorkers }, func(c *C.kvready_engine_config) *C.int32_t { return &c.quiesce_workers }),
	duration("RequestTimeout", "request_timeout_ns",
		func(r *readiness.Config) *time.Duration { return &r.RequestTimeout }, func(c *C.kvready_engine_config) *C.int64_t { return &c.request_timeout_ns }),
	duration("DrainGrace", "drain_grace_ns",
		func(r *readiness.Config) *time.Duration { return &r.DrainGrace }, func(c *C.kvready_engine_config) *C.int64_t { return &c.drain_grace_ns }),
	duration("QuiesceTimeout", "quiesce_timeout_ns",
		func(r *readiness.Config) *time.Duration { return &r.QuiesceTimeout }, func(c *C.kvready_engine_config) *C.int64_t { return &c.quiesce_timeout_ns }),
	duration("RetryBackoff", "retry_backoff_ns",
		func(r *readiness.Config) *time.Duration { return &r.RetryBackoff }, func(c *C.kvready_engine_config) *C.int64_t { return &c.retry_backoff_ns }),
	duration("MaxRetryBackoff", "max_retry_backoff_ns",
		func(r *readiness.Config) *time.Duration { return &r.MaxRetryBackoff }, func(c *C.kvready_engine_config) *C.int64_t { return &c.max_retry_backoff_ns }),
	count("KeepReleased", "keep_released",
		func(r *readiness.Config) *int { return &r.KeepReleased }, func(c *C.kvready_engine_config) *C.int32_t { return &c.keep_released }),
	{"Containment", "policy",
		func(c *C.kvready_engine_config, r *readiness.Config) error {
			// A policy the core does not know is refused by its validation,
			// with every other problem of the config; one that does not fit
			// a byte is named 255.
			r.Containment = readiness.Policy(255)
			if c.policy >= 0 && c.policy <= 255 {
				r.Containment = readiness.Policy(c.policy)
			}
			return nil
		},
		func(r *readiness.Config, c *C.kvready_engine_config) { c.policy = C.int32_t(r.Containment) }},
	duration("RecoverEvery", "recover_every_ns",
		func(r *readiness.Config) *time.Duration { return &r.RecoverEvery }, func(c *C.kvready_engine_config) *C.int64_t { return &c.recover_every_ns }),
	count("MaxOutstanding", "max_outstanding",
		func(r *readiness.Config) *int { return &r.MaxOutstanding }, func(c *C.kvready_engine_config) *C.int32_t { return &c.max_outstanding }),
}

// count is a setting held in an int here and an int32_t in C.
func count(name, cname string, g func(*readiness.Config) *int, c func(*C.kvready_engine_config) *C.int32_t) setting {
	return setting{name, cname,
		func(cc *C.kvready_engine_config, r *readiness.Config) error { *g(r) = int(*c(cc)); return nil },
		func(r *readiness.Config, cc *C.kvready_engine_config) { *c(cc) = C.int32_t(*g(r)) }}
}

// duration is a setting held in a time.Duration here and int64_t nanoseconds
// in C, at most maxDuration.
func duration(name, cname string, g func(*readiness.Config) *time.Duration, c func(*C.kvready_engine_config) *C.int64_t) setting {
	return setting{name, cname,
		func(cc *C.kvready_engine_config, r *readiness.Config) error {
			ns := *c(cc)
			if ns > maxDuration {
				return invalid("kvready_engine_new: config.%s %d; want at most %d (2^61 ns, about 73 years: deadlines are the clock plus these, in int64 ns)", cname, int64(ns), int64(maxDuration))
			}
			*g(r) = time.Duration(ns)
			return nil
		},
		func(r *readiness.Config, cc *C.kvready_engine_config) { *c(cc) = C.int64_t(*g(r)) }}
}

// settingsFromC sets every setting of r from c.
func settingsFromC(c *C.kvready_engine_config, r *readiness.Config) error {
	for _, s := range settings {
		if err := s.toGo(c, r); err != nil {
			return err
		}
	}
	return nil
}

// configDefaults is kvready_engine_config with readiness.Defaults() in every
// setting and no handle, no layout.
func configDefaults() C.kvready_engine_config {
	d := readiness.Defaults()
	var c C.kvready_engine_config
	for _, s := range settings {
		s.toC(&d, &c)
	}
	return c
}

//export kvready_engine_config_defaults
func kvready_engine_config_defaults(config *C.kvready_engine_config) (st C.int) {
	defer guard(0, &st)
	if config == nil {
		return fail(0, invalid("kvready_engine_config_defaults: config is NULL"))
	}
	*config = configDefaults()
	return C.KVREADY_OK
}
