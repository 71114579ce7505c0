package peer

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/transfer"
)

// The 16-byte namespaces of the names this package derives: a receiver's
// destination pages and a sender's source pages. Each is its own, so a page
// name never equals a content-addressed store's name (staging's namespaces
// are hashes) or the other side's.
const (
	destNamespace   = "kvready:peer:dst"
	sourceNamespace = "kvready:peer:src"
)

// PageName is the unit name of page index of layer group group of one
// attempt of a request, on the receiving side: what Receiver.Expect hands
// out, and what the owner lends the page's row under. It is deterministic
// and names the attempt, so a retry's pages never share a name with an
// earlier attempt's, and a fetch is tied to its plan by its extent's names
// alone. group and index must be in [0, 2^32).
func PageName(req transfer.RequestID, att transfer.AttemptID, group, index int) contract.Name {
	var n contract.Name
	copy(n[:16], destNamespace)
	binary.BigEndian.PutUint64(n[16:], uint64(req))
	binary.BigEndian.PutUint32(n[24:], uint32(att))
	binary.BigEndian.PutUint32(n[28:], uint32(group))
	binary.BigEndian.PutUint32(n[32:], uint32(index))
	return n
}

// SourceName is PageName for a sender's source pages: it also names the
// accessor the sender writes as, so one process's KV and auxiliary senders
// of one attempt never share a name.
func SourceName(req transfer.RequestID, att transfer.AttemptID, as transfer.AccessorID, group, index int) contract.Name {
	var n contract.Name
	copy(n[:16], sourceNamespace)
	binary.BigEndian.PutUint64(n[16:], uint64(req))
	binary.BigEndian.PutUint32(n[24:], uint32(att))
	binary.BigEndian.PutUint32(n[28:], uint32(group))
	binary.BigEndian.PutUint32(n[32:], uint32(index))
	binary.BigEndian.PutUint16(n[36:], as.Rank)
	n[38] = byte(as.Role)
	return n
}

// Plan ties a fetch to its request: what the owner tells the receiver
// before it lends the pages. Request and Attempt are the session's identity
// (every piece of evidence names them), Writers the exact cohort — every
// accessor that will write the pages, KV and auxiliary, every rank — and
// Chunk this rank's pages (the destination device pages' ids, per layer
// group, with each group's kind, the token range and IsLast). BlockTokens is
// the tokens one PAGED page holds.
type Plan struct {
	Request     transfer.RequestID
	Attempt     transfer.AttemptID
	Writers     []transfer.AccessorID
	Chunk       transfer.Chunk
	BlockTokens int
}

// Key is the plan's session identity.
func (p Plan) Key() transfer.SessionKey {
	return transfer.SessionKey{Request: p.Request, Attempt: p.Attempt}
}

// Page is one page of a plan: its unit name, where it sits in the chunk, and
// what a delivery must reach for it to be served.
type Page struct {
	Name  contract.Name
	Group int // the chunk's layer group
	Index int // its place among the group's ids
	// ID is Chunk.Blocks(Group)[Index]: the device page (or STATE slot) the
	// row's Device points at.
	ID   int
	Kind transfer.CacheKind
	// Block is the block ordinal to lend the row at (staging.Row.Block): a
	// PAGED page's block in the request, a STATE slot's the block holding
	// the chunk's last token.
	Block int
	// End is the token a delivery must reach for the page to be served: a
	// PAGED page's span end (the chunk's end for its last page), a STATE
	// slot's exact checkpoint — the chunk's end (see Served).
	End int64
}

// Pages validates the plan and lists its pages in chunk order (group by
// group, index by index), named by PageName. It reports every mistake at
// once as a *transfer.InputError: an attempt of 0; BlockTokens < 1; no
// writers, a writer with no peer or role, a writer named twice; a token
// range that does not start on a block boundary; a PAGED group whose pages
// do not cover the range block by block (ceil((end-start)/BlockTokens)
// pages, or none); no page at all.
func (p Plan) Pages() ([]Page, error) {
	m := mistakes{what: "plan"}
	if p.Attempt == 0 {
		m.add("attempt", "0", "an attempt id >= 1")
	}
	checkWriters(&m, p.Writers)
	if p.BlockTokens < 1 {
		m.add("block_tokens", strconv.Itoa(p.BlockTokens), "at least 1")
		return nil, m.result()
	}
	b := int64(p.BlockTokens)
	tr := p.Chunk.Tokens()
	if tr.Start%b != 0 {
		m.add("chunk.tokens.start", strconv.FormatInt(tr.Start, 10), fmt.Sprintf("a multiple of block_tokens %d: a chunk starts on a block boundary", b))
	}
	want := (tr.End - tr.Start + b - 1) / b
	total := 0
	for g := range p.Chunk.Groups() {
		total += p.Chunk.NumBlocks(g)
	}
	pages := make([]Page, 0, total) // one allocation, sized once
	for g := range p.Chunk.Groups() {
		n := p.Chunk.NumBlocks(g)
		kind := p.Chunk.Kind(g)
		if kind == transfer.Paged && n != 0 && int64(n) != want {
			m.add(fmt.Sprintf("chunk.groups[%d].blocks", g), fmt.Sprintf("%d pages", n),
				fmt.Sprintf("%d pages covering %s block by block, or none", want, tr))
		}
		for i := range n {
			id := p.Chunk.Block(g, i)
			pg := Page{Name: PageName(p.Request, p.Attempt, g, i), Group: g, Index: i, ID: id, Kind: kind}
			if kind == transfer.Paged {
				pg.Block = int(tr.Start/b) + i
				pg.End = min(tr.Start+int64(i+1)*b, tr.End)
			} else {
				pg.Block = int(max(tr.Start, tr.End-1) / b)
				pg.End = tr.End
			}
			pages = append(pages, pg)
		}
	}
	if len(pages) == 0 && len(m.list) == 0 {
		m.add("chunk", "no pages", "at least one page to move")
	}
	if len(pages) > math.MaxUint16 {
		m.add("chunk", fmt.Sprintf("%d pages", len(pages)), fmt.Sprintf("at most %d pages in one plan", math.MaxUint16))
	}
	if err := m.result(); err != nil {
		return nil, err
	}
	return pages, nil
}

func checkWriters(m *mistakes, ws []transfer.AccessorID) {
	if len(ws) == 0 {
		m.add("writers", "none", "the exact cohort: at least one writer")
	}
	for i, w := range ws {
		j := slices.Index(ws[:i], w)
		if j < 0 && validAccessor(w) {
			continue // named only for a mistake: a valid plan allocates no field name
		}
		field := fmt.Sprintf("writers[%d]", i)
		checkAccessor(m, field, w)
		if j >= 0 {
			m.add(field, w.String(), fmt.Sprintf("a writer not already named (writers[%d])", j))
		}
	}
}

func validAccessor(w transfer.AccessorID) bool { return validPeer(w.Peer) && w.Role.Valid() }

func validPeer(p transfer.Peer) bool { return p != "" && len(p) <= transfer.MaxPeerLen }

func checkAccessor(m *mistakes, field string, w transfer.AccessorID) {
	if !validPeer(w.Peer) {
		checkPeer(m, field+".peer", w.Peer) // the name is built only for a mistake
	}
	if !w.Role.Valid() {
		m.add(field+".role", w.Role.String(), "kv or aux")
	}
}

func checkPeer(m *mistakes, field string, p transfer.Peer) {
	if !validPeer(p) {
		m.add(field, strconv.Quote(string(p)), fmt.Sprintf("a peer name of 1 to %d bytes", transfer.MaxPeerLen))
	}
}

// Served is the set of pages a delivery reaching tokenEnd served, read by
// each page's kind: a PAGED page once its whole span is in (its End at or
// before tokenEnd: a unit is delivered whole or not at all, so a page whose
// span the delivery cut is not served, though its prefix is valid); a STATE
// slot only when tokenEnd is its exact checkpoint, the chunk's end — the
// cohort's token_end is the least any writer reached, so below the chunk's
// end nothing says the slot holds the state at tokenEnd.
func Served(pages []Page, tokenEnd int64) contract.NameSet {
	var few [scanMax]contract.Name // NewNameSet keeps no slice: a few names stay on the stack
	names := few[:0]
	for _, pg := range pages {
		if pg.End <= tokenEnd {
			names = append(names, pg.Name)
		}
	}
	return contract.NewNameSet(names...)
}

// Usable says where the request may resume after a delivery reaching
// tokenEnd, with the pages it served (Served) copied into the device: the
// chunk's own answer (transfer.Chunk.Usable: a PAGED group a bound, a STATE
// group its exact checkpoint), cut for each PAGED group that moved pages at
// the end of its last whole page served, and nowhere when a STATE slot was
// not served. A tokenEnd outside the chunk's range is an error.
func (p Plan) Usable(tokenEnd int64) (transfer.Usable, error) {
	u, err := p.Chunk.Usable(tokenEnd)
	if err != nil {
		return transfer.Usable{}, err
	}
	pages, err := p.Pages()
	if err != nil {
		return transfer.Usable{}, err
	}
	if u.None {
		return u, nil
	}
	for g := range p.Chunk.Groups() {
		if len(p.Chunk.Blocks(g)) == 0 {
			continue
		}
		if p.Chunk.Kind(g) == transfer.State {
			if tokenEnd < p.Chunk.Tokens().End {
				return transfer.Usable{None: true}, nil // the slot was not served
			}
			continue
		}
		end := p.Chunk.Tokens().Start
		for _, pg := range pages {
			if pg.Group == g && pg.End <= tokenEnd {
				end = max(end, pg.End)
			}
		}
		u.To = min(u.To, end)
	}
	if u.From > u.To {
		return transfer.Usable{None: true}, nil
	}
	return u, nil
}

// mistakes collects an input's mistakes, as package transfer does, and
// reports them at once.
type mistakes struct {
	what string
	list []transfer.Mistake
}

func (m *mistakes) add(field, given, want string) {
	m.list = append(m.list, transfer.Mistake{Field: field, Given: given, Want: want})
}

func (m *mistakes) result() error {
	if len(m.list) == 0 {
		return nil
	}
	return &transfer.InputError{What: m.what, Mistakes: m.list}
}

// wakeCh wakes the goroutines waiting for the next change. The channel is
// made only when someone waits for it: outcomes are observed once a page,
// and almost never with a waiter, so a change nobody waits for costs no
// allocation. Its owner's lock guards it.
type wakeCh struct{ ch chan struct{} }

// wait is the channel the next fire closes.
func (w *wakeCh) wait() <-chan struct{} {
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// fire wakes every waiter.
func (w *wakeCh) fire() {
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// pageIndex finds a plan's page by its name: by scanning the pages when
// they are few — most plans are a page or a few, and a map a plan cost two
// allocations a page on each side — by a map when they are many.
type pageIndex struct {
	pages []Page
	m     map[contract.Name]int // nil for at most scanMax pages
}

const scanMax = 8

// keepPages sets *kept to a copy of pages that the caller of Expect never
// sees, and answers the pages the caller gets: a one-page plan's copy is
// kept in one, its record's own backing — no allocation of its own — and
// the caller gets pages itself; a larger plan's caller gets a clone.
func keepPages(kept *[]Page, one []Page, pages []Page) []Page {
	if len(pages) == 1 && cap(one) >= 1 {
		*kept = append(one[:0], pages[0])
		return pages
	}
	*kept = pages
	return slices.Clone(pages)
}

func newPageIndex(pages []Page) pageIndex {
	x := pageIndex{pages: pages}
	if len(pages) > scanMax {
		x.m = make(map[contract.Name]int, len(pages))
		for i, pg := range pages {
			x.m[pg.Name] = i
		}
	}
	return x
}

// of is the index of the page named n; 0 for a name of no page, as the map
// it stands for answers (callers look up only names of the plan).
func (x pageIndex) of(n contract.Name) int {
	if x.m != nil {
		return x.m[n]
	}
	for i, pg := range x.pages {
		if pg.Name == n {
			return i
		}
	}
	return 0
}
