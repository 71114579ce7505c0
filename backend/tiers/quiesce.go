package tiers

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvready/kvready/contract"
)

// group is the parts of the listed attempts that one tier, in one role, has
// not yet proven: what that tier's Quiesce is asked about, and nothing else.
type group struct {
	tier       int
	role       role
	parts      []*part
	unprovable bool // a part escaped without an attempt
}

// groups gathers the unproven parts of as by (tier, role), in tier order.
func (b *Backend) groups(as []*attempt) []group {
	var gs []group
	at := map[[2]int]int{}
	for _, a := range as {
		for _, p := range a.snapshot() {
			if p.proven.Load() {
				continue
			}
			r := rolePublish // a promotion is its tier's publication
			if p.role == roleFetch {
				r = roleFetch
			}
			k := [2]int{p.tier, int(r)}
			i, ok := at[k]
			if !ok {
				i = len(gs)
				at[k] = i
				gs = append(gs, group{tier: p.tier, role: r})
			}
			if p.at == nil {
				gs[i].unprovable = true
				continue
			}
			gs[i].parts = append(gs[i].parts, p)
		}
	}
	return gs
}

func (g group) attempts() []contract.Attempt {
	list := make([]contract.Attempt, len(g.parts))
	for i, p := range g.parts {
		list[i] = p.at
	}
	return list
}

func (b *Backend) prover(g group) interface {
	Quiesce(context.Context, []contract.Attempt) (bool, error)
} {
	if g.role == roleFetch {
		return b.tiers[g.tier].Fetcher
	}
	return b.tiers[g.tier].Publisher
}

// Quiesce answers true only when every tier handed a unit of the listed
// attempts — every fetch, publication and promotion — proved its own access
// over. It first waits (honouring ctx) until each attempt has handed out all
// it ever will and is done with the extent its caller handed (a publication:
// every tier's answer judged), then asks each tier only about the attempts
// it was handed;
// what a tier proved once is not asked again. A tier's false or error is
// the stack's (errors name the tier), and a tier that escaped without an
// attempt can never be proven. The first Poll after it answered true polls
// the tiers' answers once more (confirm): one that changed since the stack
// answered turns a Delivered into Failed naming the tier.
func (b *Backend) Quiesce(ctx context.Context, list []contract.Attempt) (bool, error) {
	as, err := b.attempts("Quiesce", list)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("tiers: Quiesce: %w", err)
	}
	for i, a := range as {
		select {
		case <-a.submitted:
		case <-ctx.Done():
			return false, fmt.Errorf("tiers: Quiesce: attempt %d is still handing units to its tiers: %w", i, ctx.Err())
		}
	}
	proven := true
	var errs []error
	for _, g := range b.groups(as) {
		if g.unprovable {
			proven = false
			errs = append(errs, fmt.Errorf("%s escaped a %s without an attempt: its access can never be proven", b.name(g.tier), g.role))
		}
		if len(g.parts) == 0 {
			continue
		}
		var ok bool
		err := guard(func() error {
			var err error
			ok, err = b.prover(g).Quiesce(ctx, g.attempts())
			return err
		})
		if err != nil {
			proven = false
			errs = append(errs, fmt.Errorf("%s: %w", b.name(g.tier), err))
			continue
		}
		if !ok {
			proven = false
			continue
		}
		for _, p := range g.parts {
			p.proven.Store(true)
		}
	}
	if len(errs) > 0 {
		return false, fmt.Errorf("tiers: Quiesce: %w", errors.Join(errs...))
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("tiers: Quiesce: %w", err)
	}
	if proven {
		for _, a := range as {
			a.proven.Store(true)
		}
	}
	return proven, nil
}

// TryQuiesce answers Quiesce's question without blocking
// (contract.QuiesceProber): AccessEnded once every tier's parts are proven
// (asking each tier's own TryQuiesce), AccessUnproven when some tier's would
// answer false (or a part can never be proven), AccessUnknown while an
// attempt may still hand units out, or when a tier has no probe or cannot
// say now. A tier's error is the probe's, naming the tier.
func (b *Backend) TryQuiesce(list []contract.Attempt) (contract.Access, error) {
	as, err := b.attempts("TryQuiesce", list)
	if err != nil {
		return contract.AccessUnknown, err
	}
	for _, a := range as {
		select {
		case <-a.submitted:
		default:
			return contract.AccessUnknown, nil
		}
	}
	unknown, unproven := false, false
	for _, g := range b.groups(as) {
		if g.unprovable {
			unproven = true
		}
		if len(g.parts) == 0 {
			continue
		}
		pr, ok := b.prover(g).(contract.QuiesceProber)
		if !ok {
			unknown = true
			continue
		}
		var acc contract.Access
		err := guard(func() error {
			var err error
			acc, err = pr.TryQuiesce(g.attempts())
			return err
		})
		if err != nil {
			return contract.AccessUnknown, fmt.Errorf("tiers: TryQuiesce: %s: %w", b.name(g.tier), err)
		}
		switch acc {
		case contract.AccessEnded:
			for _, p := range g.parts {
				p.proven.Store(true)
			}
		case contract.AccessUnproven:
			unproven = true
		default:
			unknown = true
		}
	}
	switch {
	case unproven:
		return contract.AccessUnproven, nil
	case unknown:
		return contract.AccessUnknown, nil
	}
	for _, a := range as {
		a.proven.Store(true)
	}
	return contract.AccessEnded, nil
}
