package transfer

import (
	"fmt"
	"strconv"
	"strings"
)

// CacheKind says how one layer group's ids in a [Chunk] are read, and with
// them what a delivery's token_end means for that group. Both kinds are lists
// of integers, so nothing in the ids tells a page from a slot: the kind is
// stated, never inferred. The zero value is no kind (Valid reports false), so
// a group whose kind was never set is refused rather than read as PAGED.
type CacheKind uint8

const (
	// Paged: block ids covering a span whose end is a bound — any prefix of
	// the span is valid cache (attention KV).
	Paged CacheKind = iota + 1
	// State: at most one slot id standing for the request as a whole, whose
	// end is an exact checkpoint — state rolled to another position is not a
	// prefix of it (recurrent state).
	State
)

// String names the kind as the reference does ("PAGED", "STATE"), or
// "kind(N)" for a value that is neither.
func (k CacheKind) String() string {
	switch k {
	case Paged:
		return "PAGED"
	case State:
		return "STATE"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Valid reports whether k is Paged or State.
func (k CacheKind) Valid() bool { return k == Paged || k == State }

// TokenRange is the half-open token span [Start, End) a chunk moves within
// one request. An empty range (Start == End) is valid.
type TokenRange struct {
	Start int64
	End   int64
}

// String writes the range as "[start,end)".
func (r TokenRange) String() string { return fmt.Sprintf("[%d,%d)", r.Start, r.End) }

// Group is one layer group's share of a chunk: how to read its ids, and the
// ids themselves (this rank's blocks or slot).
type Group struct {
	Kind   CacheKind
	Blocks []int
}

// Chunk is one piece of a request's transfer, this rank's side of it: the
// block ids per layer group with each group's kind, the token range the piece
// moves, and whether it ends the series. A monolithic transfer is one chunk
// with IsLast true.
//
// IsLast is explicit because it cannot be derived from the range: a windowed
// or recurrent-state group never fills the span, so comparing the range with
// the prompt length lies, and a wrong IsLast ends a transfer early and in
// silence.
//
// A Chunk is immutable: NewChunk copies every id list, so the caller's slices
// may change afterwards without reaching a chunk already lent to a transfer
// (the reference asks callers not to change a lent extent; here they cannot).
type Chunk struct {
	groups []Group
	tokens TokenRange
	isLast bool
}

// Mistake is one thing wrong with an input: the field (a path such as
// "groups[2].blocks[5]"), what was given and what is accepted.
type Mistake struct {
	Field string
	Given string
	Want  string
}

// String names the field, what was given and what is accepted.
func (m Mistake) String() string {
	return fmt.Sprintf("%s: given %s, want %s", m.Field, m.Given, m.Want)
}

// InputError carries every mistake found in one input at once, in field
// order, in the manner of the runtime profile's validation: a caller fixes
// them all in one pass rather than one per try.
type InputError struct {
	What     string // what was refused: "chunk", "cohort config", "evidence", …
	Mistakes []Mistake
}

// Error lists every mistake, one per line.
func (e *InputError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "transfer: invalid %s (%d mistake", e.What, len(e.Mistakes))
	if len(e.Mistakes) != 1 {
		b.WriteString("s")
	}
	b.WriteString("):")
	for _, m := range e.Mistakes {
		b.WriteString("\n  ")
		b.WriteString(m.String())
	}
	return b.String()
}

// mistakes collects Mistakes; result returns nil when there were none.
type mistakes struct {
	what string
	list []Mistake
}

func (m *mistakes) add(field, given, want string) {
	m.list = append(m.list, Mistake{Field: field, Given: given, Want: want})
}

func (m *mistakes) result() error {
	if len(m.list) == 0 {
		return nil
	}
	return &InputError{What: m.what, Mistakes: m.list}
}

// NewChunk validates and snapshots a chunk. It reports every mistake at once
// as an *InputError: a negative or inverted token range; a group whose kind
// is not PAGED or STATE; a negative id; an id named twice in one group (two
// spans of one request written into one page); a STATE group with more than
// one slot id. A group may be empty (a windowed group with nothing in this
// piece, a STATE group this piece does not carry), and so may the chunk. On
// error the returned Chunk is the zero value.
func NewChunk(groups []Group, tokens TokenRange, isLast bool) (Chunk, error) {
	m := mistakes{what: "chunk"}
	checkRange(&m, "tokens", tokens)
	for g, grp := range groups {
		// Named only for a mistake: a valid chunk allocates no field name.
		field := func() string { return "groups[" + strconv.Itoa(g) + "]" }
		if !grp.Kind.Valid() {
			m.add(field()+".kind", grp.Kind.String(), "PAGED or STATE")
		}
		if grp.Kind == State && len(grp.Blocks) > 1 {
			m.add(field()+".blocks", fmt.Sprintf("%d slot ids", len(grp.Blocks)), "at most one slot id for a STATE group")
		}
		seen := make(map[int]int, len(grp.Blocks))
		for i, b := range grp.Blocks {
			if b < 0 {
				m.add(fmt.Sprintf("%s.blocks[%d]", field(), i), strconv.Itoa(b), "an id >= 0")
				continue
			}
			if j, dup := seen[b]; dup {
				m.add(fmt.Sprintf("%s.blocks[%d]", field(), i), strconv.Itoa(b),
					fmt.Sprintf("an id not already named (blocks[%d] is %d)", j, b))
				continue
			}
			seen[b] = i
		}
	}
	if err := m.result(); err != nil {
		return Chunk{}, err
	}
	c := Chunk{groups: make([]Group, len(groups)), tokens: tokens, isLast: isLast}
	for g, grp := range groups {
		c.groups[g] = Group{Kind: grp.Kind, Blocks: append([]int(nil), grp.Blocks...)}
	}
	return c, nil
}

func checkRange(m *mistakes, field string, r TokenRange) {
	if r.Start < 0 {
		m.add(field+".start", strconv.FormatInt(r.Start, 10), "a token index >= 0")
	}
	if r.End < 0 {
		m.add(field+".end", strconv.FormatInt(r.End, 10), "a token index >= 0")
	}
	if r.Start >= 0 && r.End >= 0 && r.Start > r.End {
		m.add(field, r.String(), "start <= end")
	}
}

// Groups returns the number of layer groups.
func (c Chunk) Groups() int { return len(c.groups) }

// Kind returns group g's kind, for 0 <= g < Groups().
func (c Chunk) Kind(g int) CacheKind { return c.groups[g].Kind }

// Blocks returns a copy of group g's ids, for 0 <= g < Groups().
func (c Chunk) Blocks(g int) []int { return append([]int(nil), c.groups[g].Blocks...) }

// NumBlocks returns the number of group g's ids, for 0 <= g < Groups().
func (c Chunk) NumBlocks(g int) int { return len(c.groups[g].Blocks) }

// Block returns group g's i-th id, for 0 <= i < NumBlocks(g): Blocks
// without its copy, for a caller that reads every id once a page.
func (c Chunk) Block(g, i int) int { return c.groups[g].Blocks[i] }

// Tokens returns the token range the chunk moves.
func (c Chunk) Tokens() TokenRange { return c.tokens }

// IsLast reports the explicit end-of-series flag.
func (c Chunk) IsLast() bool { return c.isLast }

// Extent is one request's ask: which request (the reference's extent name)
// and this rank's blocks for it, the destination when fetching and the source
// when publishing. Handing an extent to a transfer lends the pages its chunk
// names until every accessor of the transfer is proven settled — an outcome
// does not end the loan.
type Extent struct {
	Request RequestID
	Chunk   Chunk
}

// Usable is the set of positions p at which a request may resume with the
// cache a delivery left: From <= p <= To, or no position when None.
type Usable struct {
	From, To int64
	None     bool
}

// At reports whether the request may resume at position p.
func (u Usable) At(p int64) bool { return !u.None && u.From <= p && p <= u.To }

// String writes the set as "[from,to]" or "none".
func (u Usable) String() string {
	if u.None {
		return "none"
	}
	return fmt.Sprintf("[%d,%d]", u.From, u.To)
}

// intersect returns the positions both u and v allow.
func (u Usable) intersect(v Usable) Usable {
	if u.None || v.None {
		return Usable{None: true}
	}
	w := Usable{From: max(u.From, v.From), To: min(u.To, v.To)}
	if w.From > w.To {
		return Usable{None: true}
	}
	return w
}

// UsableGroup says what group g holds after a delivery that reached tokenEnd
// (the absolute offset of [Delivered]), read by the group's kind: a PAGED
// group is a bound, so any prefix of the chunk's span up to tokenEnd is valid
// and the request may resume anywhere in [Start, tokenEnd]; a STATE group is
// an exact checkpoint, so its slot is valid only at tokenEnd itself — and a
// STATE group this chunk carries no slot for gives no position at all.
//
// A tokenEnd outside the chunk's range [Start, End] is an error naming both:
// a delivery cannot reach before the piece it moved began, nor beyond the
// span it was asked for (the caller treats it as a contract violation).
func (c Chunk) UsableGroup(g int, tokenEnd int64) (Usable, error) {
	if g < 0 || g >= len(c.groups) {
		return Usable{}, fmt.Errorf("transfer: layer group %d: the chunk has groups 0..%d", g, len(c.groups)-1)
	}
	if err := c.checkEnd(tokenEnd); err != nil {
		return Usable{}, err
	}
	return c.usable(g, tokenEnd), nil
}

// Usable says where the request may resume with every group of the chunk at
// once after a delivery that reached tokenEnd: the positions every group
// allows (see UsableGroup). One STATE group pins the whole chunk to tokenEnd;
// a chunk with no groups constrains nothing within its range.
func (c Chunk) Usable(tokenEnd int64) (Usable, error) {
	if err := c.checkEnd(tokenEnd); err != nil {
		return Usable{}, err
	}
	u := Usable{From: c.tokens.Start, To: tokenEnd}
	for g := range c.groups {
		u = u.intersect(c.usable(g, tokenEnd))
	}
	return u, nil
}

func (c Chunk) checkEnd(tokenEnd int64) error {
	if tokenEnd < c.tokens.Start || tokenEnd > c.tokens.End {
		return fmt.Errorf("transfer: token_end %d is outside the chunk's range [%d,%d]; a delivery reaches within what was asked",
			tokenEnd, c.tokens.Start, c.tokens.End)
	}
	return nil
}

func (c Chunk) usable(g int, tokenEnd int64) Usable {
	grp := c.groups[g]
	if grp.Kind == State {
		if len(grp.Blocks) == 0 {
			return Usable{None: true}
		}
		return Usable{From: tokenEnd, To: tokenEnd}
	}
	return Usable{From: c.tokens.Start, To: tokenEnd}
}
