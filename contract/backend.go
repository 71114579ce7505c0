package contract

import (
	"context"
	"errors"
)

// ErrSubmissionRejected reports that a submission was refused before any work,
// notification or memory access escaped, so there is nothing to quiesce.
// Backends wrap it (fmt.Errorf("%w: ...", ErrSubmissionRejected)); callers test
// with errors.Is. Once anything has escaped, a backend must instead return an
// Attempt and report Failed through it.
var ErrSubmissionRejected = errors.New("submission rejected before any effect escaped")

// ErrInvalidHint is wrapped by OpenRoute for a hint it does not recognise, that is
// incomplete, or that names an unknown source.
var ErrInvalidHint = errors.New("invalid route hint")

// Route is an opaque per-request source plan created by a backend's OpenRoute.
type Route interface {
	// Close ends route preparation once the caller stops submitting along it.
	// Deliveries already made go on and still need Quiesce. A successful Close is
	// idempotent; a failed one leaves the route open and Close may be retried.
	Close() error
}

// Registration is one registered, non-overlapping memory span.
type Registration interface {
	// Close revokes exactly this registration. It neither waits for access to end
	// nor proves anything about it: call it only after every delivery using the
	// span has been quiesced. It is idempotent by handle — closing an old handle
	// again never revokes a newer registration of the same address — and a failed
	// Close leaves the span registered and the handle retryable.
	Close() error
}

// Fetcher is a process-lifetime fetching backend. Its methods may be called
// concurrently, across requests and on the same attempts.
type Fetcher interface {
	// Fetch submits a fetch into the extent's destinations at once, without
	// waiting. route is an open route from this backend's OpenRoute, or nil. It
	// returns an Attempt for every submission whose effects escaped, failed ones
	// included; an error wrapping ErrSubmissionRejected means nothing escaped.
	Fetch(extent CacheExtent, route Route) (Attempt, error)

	// Quiesce answers the physical question for the listed attempts only: true
	// when none of them will ever access caller memory again. False or an error
	// means that cannot be established, and promises nothing about waiting
	// longer; the memory stays retired until a later call answers true. A
	// cancelled ctx is reported as an error, never as true.
	Quiesce(ctx context.Context, attempts []Attempt) (bool, error)

	// Settle waits until every listed attempt has a stable logical outcome. It
	// never waits for unlisted attempts and proves nothing about memory access.
	Settle(ctx context.Context, attempts []Attempt) error

	// Probe reports advisory hits among units without moving payload. answered is
	// false when the backend cannot answer more cheaply than a fetch, which is
	// distinct from answering with no hits. A later fetch may still miss. A probe
	// failure is an error, never an empty or unanswered result.
	Probe(ctx context.Context, name []byte, units []Name) (hits NameSet, answered bool, err error)

	// OpenRoute prepares a per-request route without touching cache memory. A
	// single-source backend returns an error wrapping errors.ErrUnsupported; an
	// unknown or incomplete hint is an error wrapping ErrInvalidHint. It never
	// returns ErrSubmissionRejected.
	OpenRoute(hint map[string]string) (Route, error)
}

// Publisher is a process-lifetime publishing backend, independent of Fetcher.
// Publication is atomically visible per unit, not per extent; publishing again
// under one extent name merges units and removes none.
type Publisher interface {
	// Publish submits a publication that reads the extent's already-readable
	// sources. Errors and attempts mean what they mean for Fetcher.Fetch.
	Publish(extent CacheExtent) (Attempt, error)
	// Quiesce has Fetcher.Quiesce's semantics.
	Quiesce(ctx context.Context, attempts []Attempt) (bool, error)
	// Settle has Fetcher.Settle's semantics.
	Settle(ctx context.Context, attempts []Attempt) error
}

// PoolRegistrar is an optional capability: registering memory spans before any
// delivery refers to them.
type PoolRegistrar interface {
	// RegisterPool registers [address, address+size). An overlapping live
	// registration is refused, and a failed registration registers nothing.
	RegisterPool(address uintptr, size int) (Registration, error)
}
