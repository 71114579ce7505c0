package simulate

import (
	"bytes"
	"sync"
	"unsafe"

	"github.com/kvready/kvready/transfer"
)

// pageChecker is the disaggregated run's independent witness. It watches the
// decode side's pages themselves, never a manager's or a session's state: it
// learns each registration from the decode process's transport (it wraps it),
// each lend and free from the pool's owner, and asks the simulated network's
// own record (sim.Network.MayWrite) whether a registration may still be
// written. Every write that lands is seen: the network performs one action a
// step, and the checker reads every page's header after each.
//
// What it counts against safety:
//   - a page returned to the pool while a registration covering it may still
//     be written, by the network's record (freedWhileWritable);
//   - a write landing in a page while it is free (writesIntoFree);
//   - a write landing in a lent page that is not its tenant's own — an
//     earlier attempt's, an earlier request's (lateWrites);
//   - a page whose bytes are not its tenant's content when the manager reads
//     it as delivered (corruptReads);
//   - a page lent while already lent, or freed while free (doubleLends).
//
// It watches the prefill side's source slots too — the staging slots a
// prefill manager lends to its Sender, whose puts read them when they land
// (the network reads a put's source then) — learning each lend and free
// from their owner, and counts:
//   - a source slot returned to its allocator while a put that reads it has
//     neither landed nor been dropped, by the network's record
//     (sim.Network.MayRead: sourcesFreedWhileRead);
//   - a write landing in a decode page with the freed source's sentinel: a
//     put read its source after the slot was returned (freedSourceReads);
//   - a source slot lent while lent, or freed while free (sourceDoubleLends).
type pageChecker struct {
	mu    sync.Mutex
	net   accessRecord
	pages [][]byte
	addr  []uintptr
	state []pageState

	registrations                         int
	frees, lends, reads, copies, landings int
	freedWhileWritable                    int
	writesIntoFree, lateWrites            int
	corruptReads, doubleLends             int

	sources                                 [][]byte  // every prefill pool's slots, pool after pool
	sourceTenant                            []pageTag // kind pageLent while lent, pageSourceFree while free
	sourceLends, sourceFrees                int
	sourcesFreedWhileRead, freedSourceReads int
	sourceDoubleLends                       int
}

// accessRecord is the medium's own record the checker asks: whether a
// registration may still be written, and whether a put may still read a
// source. The simulated network keeps it of every writer it runs
// (sim.Network); over UCX it is the transport's registration table, seen
// from the decode process (ucxRecord).
type accessRecord interface {
	MayWrite(m transfer.Memory) bool
	MayRead(src []byte) bool
}

// pageState is what the checker knows of one page.
type pageState struct {
	tenant pageTag // kind pageLent while lent; pageFree while free
	header [headerLength]byte
	regs   []transfer.Memory // registrations covering the page that may still matter
}

func newPageChecker(net accessRecord, pages [][]byte) *pageChecker {
	c := &pageChecker{net: net, pages: pages, addr: make([]uintptr, len(pages)), state: make([]pageState, len(pages))}
	for i, p := range pages {
		c.addr[i] = uintptr(unsafe.Pointer(unsafe.SliceData(p)))
		c.state[i].tenant = pageTag{kind: pageFree}
		c.state[i].tenant.fill(p)
		copy(c.state[i].header[:], p)
	}
	return c
}

// violations is the sum of everything counted against safety.
func (c *pageChecker) violations() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.freedWhileWritable + c.writesIntoFree + c.lateWrites + c.corruptReads + c.doubleLends +
		c.sourcesFreedWhileRead + c.freedSourceReads + c.sourceDoubleLends
}

// watch wraps the decode process's transport: every registration made
// through it is recorded against the pages it covers.
func (c *pageChecker) watch(t transfer.Transport) transfer.Transport {
	return watchedTransport{Transport: t, c: c}
}

type watchedTransport struct {
	transfer.Transport
	c *pageChecker
}

// Register registers mem, then tells the checker which pages it covers.
func (t watchedTransport) Register(mem []byte) (transfer.Memory, error) {
	m, err := t.Transport.Register(mem)
	if err == nil {
		t.c.registered(mem, m)
	}
	return m, err
}

func (c *pageChecker) registered(mem []byte, m transfer.Memory) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.registrations++
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	hi := lo + uintptr(len(mem))
	for i, a := range c.addr {
		if a < hi && lo < a+uintptr(len(c.pages[i])) {
			c.state[i].regs = append(c.state[i].regs, m)
		}
	}
}

// lend records page i lent to a tenant (its request, attempt and index in
// the chunk) and writes the lent sentinel into it.
func (c *pageChecker) lend(i int, t pageTag) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.state[i]
	c.lends++
	if s.tenant.kind != pageFree {
		c.doubleLends++
	}
	s.tenant = pageTag{kind: pageLent, request: t.request, index: t.index, attempt: t.attempt}
	s.tenant.fill(c.pages[i])
	copy(s.header[:], c.pages[i])
}

// free records page i back in the pool: it must be that no registration
// covering it may still be written. Registrations the network says nothing
// can write any more are forgotten — nothing in the run hands their keys to
// a writer later — and the free sentinel is written.
func (c *pageChecker) free(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.state[i]
	c.frees++
	if s.tenant.kind != pageLent {
		c.doubleLends++
	}
	writable := false
	kept := s.regs[:0]
	for _, m := range s.regs {
		if c.net.MayWrite(m) {
			writable = true
			kept = append(kept, m)
		}
	}
	clear(s.regs[len(kept):])
	s.regs = kept
	if writable {
		c.freedWhileWritable++
	}
	s.tenant = pageTag{kind: pageFree}
	s.tenant.fill(c.pages[i])
	copy(s.header[:], c.pages[i])
}

// read checks page i as the manager reads it as delivered to tenant t: it
// must be lent to t and hold t's content, every byte.
func (c *pageChecker) read(i int, t pageTag) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	s := c.state[i]
	want := pageTag{kind: pageData, request: t.request, index: t.index, attempt: t.attempt}
	if s.tenant.kind != pageLent || !s.tenant.sameTenant(t) || s.tenant.index != t.index || !bytes.Equal(c.pages[i], want.content()) {
		c.corruptReads++
		return false
	}
	return true
}

// readCopy checks a copy of a page read as delivered to tenant t — the
// device row the manager copied it into: every byte must be t's content.
func (c *pageChecker) readCopy(got []byte, t pageTag) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.copies++
	if !bytes.Equal(got, pageTag{kind: pageData, request: t.request, index: t.index, attempt: t.attempt}.content()) {
		c.corruptReads++
		return false
	}
	return true
}

// scan reads every page's header after one network step and attributes
// each that changed: a write landed there.
func (c *pageChecker) scan() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.pages {
		s := &c.state[i]
		if bytes.Equal(s.header[:], p[:headerLength]) {
			continue
		}
		copy(s.header[:], p)
		c.landings++
		w := readTag(p)
		switch {
		case w.kind == pageSourceFree:
			c.freedSourceReads++ // whatever the page's state: the put read a source already returned
		case s.tenant.kind == pageFree:
			c.writesIntoFree++
		case w.kind != pageData || !w.sameTenant(s.tenant) || w.index != s.tenant.index:
			c.lateWrites++
		}
	}
}

// pagesFree counts the pages in the pool.
func (c *pageChecker) pagesFree() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.state {
		if s.tenant.kind == pageFree {
			n++
		}
	}
	return n
}

// watchSources adds a prefill pool's slots to the sources watched, each
// free (its sentinel written), and answers the index of its first slot.
func (c *pageChecker) watchSources(slots [][]byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	base := len(c.sources)
	for _, s := range slots {
		t := pageTag{kind: pageSourceFree}
		t.fill(s)
		c.sources = append(c.sources, s)
		c.sourceTenant = append(c.sourceTenant, t)
	}
	return base
}

// lendSource records source slot i lent to a publication of tenant t. It
// writes nothing: the slot already holds what the publication's copy put
// there, which its puts will read.
func (c *pageChecker) lendSource(i int, t pageTag) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sourceLends++
	if c.sourceTenant[i].kind != pageSourceFree {
		c.sourceDoubleLends++
	}
	c.sourceTenant[i] = pageTag{kind: pageLent, request: t.request, index: t.index, attempt: t.attempt}
}

// freeSource records source slot i back with its allocator: no put that
// reads it may still land. The freed source's sentinel is written, so a put
// that reads the slot later carries it into the page it lands in.
func (c *pageChecker) freeSource(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sourceFrees++
	if c.sourceTenant[i].kind != pageLent {
		c.sourceDoubleLends++
	}
	if c.net.MayRead(c.sources[i]) {
		c.sourcesFreedWhileRead++
	}
	c.sourceTenant[i] = pageTag{kind: pageSourceFree}
	c.sourceTenant[i].fill(c.sources[i])
}

// addSources counts source slots another process's checker watched (a run
// over UCX: the prefill process's): lent and returned, returned while a put
// that reads them had not completed by its record, and lent or returned
// twice.
func (c *pageChecker) addSources(lends, frees, early, doubles int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sourceLends += lends
	c.sourceFrees += frees
	c.sourcesFreedWhileRead += early
	c.sourceDoubleLends += doubles
}

// sourcesFree counts the source slots watched and those with their
// allocator.
func (c *pageChecker) sourcesFree() (free, all int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.sourceTenant {
		if t.kind == pageSourceFree {
			free++
		}
	}
	return free, len(c.sourceTenant)
}

// checkerCounts is a copy of the checker's counts.
type checkerCounts struct {
	Registrations, Frees, Lends, Reads, Copies, Landings int
	FreedWhileWritable, WritesIntoFree                   int
	LateWrites, CorruptReads, DoubleLends                int
	SourceLends, SourceFrees                             int
	SourcesFreedWhileRead, FreedSourceReads              int
	SourceDoubleLends                                    int
}

func (c *pageChecker) counts() checkerCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return checkerCounts{
		Registrations: c.registrations, Frees: c.frees, Lends: c.lends, Reads: c.reads, Copies: c.copies, Landings: c.landings,
		FreedWhileWritable: c.freedWhileWritable, WritesIntoFree: c.writesIntoFree,
		LateWrites: c.lateWrites, CorruptReads: c.corruptReads, DoubleLends: c.doubleLends,
		SourceLends: c.sourceLends, SourceFrees: c.sourceFrees,
		SourcesFreedWhileRead: c.sourcesFreedWhileRead, FreedSourceReads: c.freedSourceReads,
		SourceDoubleLends: c.sourceDoubleLends,
	}
}
