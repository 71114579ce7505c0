package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/kvready/kvready/backend/notify"
	"github.com/kvready/kvready/contract"
)

// attempts checks that every listed attempt came from this backend.
func (b *Backend) attempts(method string, list []contract.Attempt) ([]*attempt, error) {
	as := make([]*attempt, len(list))
	for i, x := range list {
		a, ok := x.(*attempt)
		if !ok || a == nil || a.b != b {
			return nil, fmt.Errorf("redis: %s: attempt %d (%T) was not returned by this backend", method, i, x)
		}
		as[i] = a
	}
	return as, nil
}

// Quiesce answers true once none of the listed attempts will touch staging
// again: every call that was given staging rows — a fetch reading straight
// into them, a publication writing straight from them — has returned; a fetch
// into scratch has made its last copy; a publication via copies has copied
// its rows into the backend's buffers. That is the backend's own knowledge,
// no answer from the server: it holds at the latest just after each attempt's
// bound, whatever the server does. Network calls may still be out then; they
// touch only the backend's buffers. Quiesce waits only on the listed
// attempts, honouring ctx; a cancelled or expired ctx is an error, never
// true.
func (b *Backend) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	if ctx == nil {
		return false, errors.New("redis: Quiesce: ctx is nil")
	}
	as, err := b.attempts("Quiesce", list)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("redis: Quiesce: %w", err)
	}
	for i, a := range as {
		select {
		case <-a.released:
		case <-ctx.Done():
			return false, fmt.Errorf("redis: Quiesce: waiting for attempt %d: %w", i, ctx.Err())
		}
	}
	if err := ctx.Err(); err != nil { // both were ready: a cancelled ctx still never answers true
		return false, fmt.Errorf("redis: Quiesce: %w", err)
	}
	return true, nil
}

// TryQuiesce answers Quiesce's question without waiting
// (contract.QuiesceProber): AccessEnded once every listed attempt's goroutines
// have returned — the same local knowledge Quiesce waits for — and
// AccessUnknown while one still runs.
func (b *Backend) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	as, err := b.attempts("TryQuiesce", list)
	if err != nil {
		return contract.AccessUnknown, err
	}
	for _, a := range as {
		select {
		case <-a.released:
		default:
			return contract.AccessUnknown, nil
		}
	}
	return contract.AccessEnded, nil
}

// Settle waits until every listed attempt has an outcome, honouring ctx. It
// proves nothing about access to staging.
func (b *Backend) Settle(ctx context.Context, list []contract.Attempt) error {
	if ctx == nil {
		return errors.New("redis: Settle: ctx is nil")
	}
	as, err := b.attempts("Settle", list)
	if err != nil {
		return err
	}
	return notify.Settle(ctx, "redis: Settle", len(as), func(i int) <-chan struct{} { return as[i].ready })
}

// Probe asks the store which of the units exist under the extent name, with
// one pipelined EXISTS per unit, bounded by ctx and the backend's timeout. The
// answer is advisory: a unit may expire or be evicted before a fetch. With
// WithoutProbe it answers "cannot answer cheaply" (answered false). A
// connection, timeout or server error is an error, never an empty answer, and
// so is a store known down (ErrUnavailable), answered at once.
func (b *Backend) Probe(ctx context.Context, name []byte, units []contract.Name) (hits contract.NameSet, answered bool, err error) {
	if err := b.usable(ctx, "Probe"); err != nil {
		return contract.NameSet{}, false, err
	}
	if len(name) == 0 {
		return contract.NameSet{}, false, errors.New("redis: Probe: extent name is empty; want the namespace the units were published under")
	}
	if b.set.noProbe {
		return contract.NameSet{}, false, nil
	}
	if b.brk.open.Load() || b.hungOnWire() {
		return contract.NameSet{}, false, fmt.Errorf("redis: Probe %q: %w", name, b.brk.refusal())
	}
	if len(units) == 0 {
		return contract.NameSet{}, true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.set.timeout)
	defer cancel()
	extent := string(name)
	pipe := b.client.Pipeline()
	key := make([]byte, 0, len(b.set.prefix)+1+tagDigits+1+len(extent)+1+contract.NameSize)
	cmds := make([]*goredis.IntCmd, len(units))
	for i := range units {
		key = appendKey(key[:0], b.set.prefix, b.set.policy, extent, &units[i])
		cmds[i] = pipe.Exists(ctx, string(key))
	}
	_, execErr := pipe.Exec(ctx)
	found := make([]contract.Name, 0, len(units))
	for i, c := range cmds {
		n, err := c.Result()
		if err == nil && execErr != nil {
			err = execErr // the pipeline failed without saying which command: none is an answer
		}
		if err != nil {
			return contract.NameSet{}, false, fmt.Errorf("redis: Probe %q: unit %d (%s): %w", extent, i, short(units[i]), err)
		}
		if n > 0 {
			found = append(found, units[i])
		}
	}
	return contract.NewNameSet(found...), true, nil
}

// OpenRoute refuses with an error wrapping errors.ErrUnsupported: the store
// is the only source, so there is no route to choose.
func (b *Backend) OpenRoute(hint map[string]string) (contract.Route, error) {
	return nil, fmt.Errorf("redis: OpenRoute: %w: the Redis backend has a single source (the store) and no routes", errors.ErrUnsupported)
}

// RegisterPool registers [address, address+size). The store needs no
// registration (values travel through the client's buffers), so this only
// keeps the contract's bookkeeping: a zero address, a non-positive size, a
// span that wraps around, or one overlapping a live registration is refused
// and registers nothing (see [pools.Registry]).
func (b *Backend) RegisterPool(address uintptr, size int) (contract.Registration, error) {
	r, err := b.pools.Register(address, size)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return r, nil
}

// Registered reports how many pool registrations are live.
func (b *Backend) Registered() int { return b.pools.Live() }
