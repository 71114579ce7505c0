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
	one        *part   // the first part (most groups have one: no list to allocate)
	more       []*part // the others
	unprovable bool    // a part escaped without an attempt
}

// add puts p in the group; left bounds how many more parts may come (the
// engine asks about a round's attempts at once, 64 in the tier figure: the
// list is made once, at its full size, not grown part by part).
func (g *group) add(p *part, left int) {
	if g.one == nil {
		g.one = p
		return
	}
	if g.more == nil {
		g.more = make([]*part, 0, left)
	}
	g.more = append(g.more, p)
}

func (g group) empty() bool { return g.one == nil }

// prove marks every part of g proven by its tier.
func (g group) prove() {
	g.one.proven.Store(true)
	for _, p := range g.more {
		p.proven.Store(true)
	}
}

// groups gathers the unproven parts of as by (tier, role), in tier order,
// into gs (a caller's buffer: a proof allocates nothing for the groups).
// Its callers ask only about attempts whose submitted signal fired: no part
// is added after it, and its firing (an atomic store the callers read)
// orders every append before these reads, so they take no lock. An
// attempt reused since (nil) has none left to prove.
func (b *Backend) groups(as []held, gs []group) []group {
	left := 0 // the parts not yet grouped
	for _, x := range as {
		if x.a != nil {
			left += len(x.a.parts)
		}
	}
	for _, x := range as {
		if x.a == nil {
			continue
		}
		for _, p := range x.a.parts {
			left--
			if p.proven.Load() {
				continue
			}
			r := rolePublish // a promotion is its tier's publication
			if p.role == roleFetch {
				r = roleFetch
			}
			i := 0
			for i < len(gs) && (gs[i].tier != p.tier || gs[i].role != r) {
				i++
			}
			if i == len(gs) {
				gs = append(gs, group{tier: p.tier, role: r})
			}
			if p.at() == nil {
				gs[i].unprovable = true
				continue
			}
			gs[i].add(p, left+1)
		}
	}
	return gs
}

// attempts is the list the group's tier is asked about: the part's own for
// a group of one (no allocation), else a new one.
func (g group) attempts() []contract.Attempt {
	if len(g.more) == 0 {
		return g.one.self[:]
	}
	list := make([]contract.Attempt, 0, 1+len(g.more))
	list = append(list, g.one.at())
	for _, p := range g.more {
		list = append(list, p.at())
	}
	return list
}

// attemptBuf is room for the attempts of list: buf (the caller's, on its
// stack) when they fit, else made once at their number (the engine asks
// about a round's attempts at once), not grown one by one.
func attemptBuf(list []contract.Attempt, buf []held) []held {
	if len(list) <= cap(buf) {
		return buf
	}
	return make([]held, 0, len(list))
}

// quiescer is what a tier's Quiesce is asked through.
type quiescer interface {
	Quiesce(context.Context, []contract.Attempt) (bool, error)
}

// provers are one tier's fetcher and publisher as the proof asks them,
// each looked up once, in New (nil where the tier has none, or the
// fetcher or publisher cannot probe): a proof asks them per lease, and an
// interface conversion per call is a lookup per call.
type provers struct {
	quiesce [2]quiescer               // [roleFetch], [rolePublish]
	probe   [2]contract.QuiesceProber // [roleFetch], [rolePublish]
}

func newProvers(t Tier) provers {
	var p provers
	if t.Fetcher != nil {
		p.quiesce[roleFetch] = t.Fetcher
		p.probe[roleFetch], _ = t.Fetcher.(contract.QuiesceProber)
	}
	if t.Publisher != nil {
		p.quiesce[rolePublish] = t.Publisher
		p.probe[rolePublish], _ = t.Publisher.(contract.QuiesceProber)
	}
	return p
}

func (b *Backend) prover(g group) quiescer { return b.provers[g.tier].quiesce[g.role] }

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
	var buf [1]held
	as, err := b.attempts("Quiesce", list, attemptBuf(list, buf[:0]))
	if err != nil {
		return false, err
	}
	defer letGo(as)
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("tiers: Quiesce: %w", err)
	}
	for i, x := range as {
		a := x.a
		if a == nil {
			continue
		}
		select {
		case <-a.submitted.wait(&a.mu):
		case <-ctx.Done():
			return false, fmt.Errorf("tiers: Quiesce: attempt %d is still handing units to its tiers: %w", i, ctx.Err())
		}
	}
	proven := true
	var errs []error
	var gbuf [4]group
	for _, g := range b.groups(as, gbuf[:0]) {
		if g.unprovable {
			proven = false
			errs = append(errs, fmt.Errorf("%s escaped a %s without an attempt: its access can never be proven", b.name(g.tier), g.role))
		}
		if g.empty() {
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
		g.prove()
	}
	if len(errs) > 0 {
		return false, fmt.Errorf("tiers: Quiesce: %w", errors.Join(errs...))
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("tiers: Quiesce: %w", err)
	}
	if proven {
		for _, x := range as {
			x.h.proven.Store(true)
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
	var buf [1]held
	as, err := b.attempts("TryQuiesce", list, attemptBuf(list, buf[:0]))
	if err != nil {
		return contract.AccessUnknown, err
	}
	defer letGo(as)
	for _, x := range as {
		if x.a != nil && !x.a.submitted.isSet() {
			return contract.AccessUnknown, nil
		}
	}
	unknown, unproven := false, false
	var gbuf [4]group
	for _, g := range b.groups(as, gbuf[:0]) {
		if g.unprovable {
			unproven = true
		}
		if g.empty() {
			continue
		}
		pr := b.provers[g.tier].probe[g.role]
		if pr == nil {
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
			g.prove()
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
	for _, x := range as {
		x.h.proven.Store(true)
	}
	return contract.AccessEnded, nil
}
