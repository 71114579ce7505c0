package simulate

import (
	"bytes"
	"fmt"
	"sync"
	"unsafe"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/readiness"
	"github.com/kvready/kvready/staging"
)

// slotKey names one staging slot: pool group and slot index.
type slotKey struct{ g, s int }

// tenancy is one grant of one slot to one lease.
type tenancy struct {
	l       *lease
	flagged bool // already counted as recycled before its fence
}

// checker is the independent witness. It never reads the engine's counters or
// states: it learns grants from the slot runs a manager reports, exposures and
// access proofs from the backend calls (through the transport), copy
// completions from the stream (through its wrapper), and it reads the bytes in
// staging, on the device and in the store. Every call holds the driver's lock
// (d.mu): the engine's goroutines reach it through the transport.
type checker struct {
	mem    *staging.Memory
	parts  []staging.Part
	tenant [][]tenancy
	// rowOwner maps a device row to its request; a copy is attributed to the
	// request's fetch (host to device) or publish (device to host).
	rowOwner  map[gpu.DevicePtr]*request
	unrecord  []*lease // leases with copies since the last Record
	completed uint64   // every event up to here resolved
	failed    map[uint64]bool
	strayCopy int // copies the checker could not attribute to a lease

	grants              int // slot grants observed
	recycledBeforeFence int // slot grants before the previous tenant's fence
	regrantsUnproven    int // of which: found at grant time
	lateWrites          int // writes that landed in a slot re-lent to another lease
	corruptRows         int // device or store rows with bytes they should not hold
	missesAsFailures    int
	failuresAsMisses    int
	rowsVerified        int
	storeChecksFailed   int // request ends whose store rows could not be read
	overclaims          int // fetches whose interval ends read a block the fetch did not bring

	// The last layer group's sliding window in tokens (0: full attention)
	// and its sink blocks, for the checker's own rule of what a resume reads.
	window, sinks int

	// Layer by layer (Config.Layerwise): the model's shape, by the
	// checker's own arithmetic (Config.layerOf), and the device stream the
	// engine copies on, asked directly whether the event after a layer's
	// copy completed. unrecordLayers are the copies since the last event,
	// as indices into their request's layerCopies.
	cfg             Config
	layers          int
	copyStream      gpu.Stream
	unrecordLayers  []layerCopy
	layersRead      int // layers the manager read, of one fetch each
	layersReadEarly int // of which: a row's copy of the layer had not landed
	corruptLayers   int // of which: a row's bytes of the layer were not its content

	// Layerwise publishes, from the device side: computeStream is the
	// stream the manager computes publishes on (asked directly whether a
	// layer's compute event completed), waited the newest of its events
	// the copy stream was put behind (gpu.Waiter: what is queued on the
	// copy stream after that wait runs after that event), unrecordSaves the
	// device→staging layer copies since the copy stream's last event.
	computeStream   gpu.Stream
	waited          uint64
	unrecordSaves   []layerCopy
	publishesSeen   int // layerwise publishes submitted to the backend
	layerSaves      int // device→staging layer copies of one row each, followed
	withdrawals     int // layerwise publishes released before their last layer, seen end
	savesEarly      int // device→staging layer copies queued neither behind nor after their compute
	unitsIncomplete int // units handed to the backend with a layer not landed or not its content
	withdrawnSent   int // withdrawn publishes the backend saw anyway
	withdrawnEarly  int // withdrawn publishes whose slots returned before their queued copies landed
}

// saveCopy is the checker's account of one layer of one row of a
// layerwise publish: whether its device→staging copy was queued, whether
// it was queued where it could only run after the layer's compute event,
// and the copy stream's event recorded after it (zero: none yet).
type saveCopy struct {
	queued, ordered bool
	ev              gpu.Event
}

// layerCopy is one layer's copy into one device row, awaiting its event.
type layerCopy struct {
	r *request
	i int // index into r.layerCopies
}

func newChecker(m *staging.Memory) *checker {
	c := &checker{mem: m, failed: map[uint64]bool{}, rowOwner: map[gpu.DevicePtr]*request{}}
	for g := range m.NumGroups() {
		c.parts = append(c.parts, m.Parts().Part(g))
	}
	for _, g := range m.Groups() {
		c.tenant = append(c.tenant, make([]tenancy, g.Slots))
	}
	return c
}

// fenced reports, from the checker's own evidence, whether l's access to its
// slots is over: the backend never saw them, refused the submission, or
// answered Quiesce true for it; and every copy l made between its slots and the
// device has completed (a failed copy is never complete).
func (c *checker) fenced(l *lease) bool {
	backendDone := !l.submitted || l.rejected || l.proven
	if !backendDone || l.copyUnrecorded {
		return false
	}
	for _, seq := range l.copySeqs {
		if seq > c.completed || c.failed[seq] {
			return false
		}
	}
	return true
}

// layerwise makes the checker follow copies layer by layer, on the copy
// stream s (the device's own, not the wrapper the engine copies through).
func (c *checker) layerwise(cfg Config, s gpu.Stream) {
	c.cfg, c.layers, c.copyStream = cfg, cfg.Layers(), s
}

// publishes makes the checker follow layerwise publishes computed on the
// compute stream s.
func (c *checker) publishes(s gpu.Stream) { c.computeStream = s }

// request registers a request's device rows, so that copies can be attributed.
func (c *checker) request(r *request, rows int) {
	for i := range rows {
		c.rowOwner[r.dev+gpu.DevicePtr(i*SlotBytes)] = r
	}
	if c.layers > 0 {
		r.layerCopies = make([]gpu.Event, rows*c.layers)
	}
	if c.computeStream != nil {
		r.computed = make([]gpu.Event, c.layers)
		r.saves = make([]saveCopy, rows*c.layers)
	}
}

// computed records that the manager queued layer k of r's publish on the
// compute stream, ev recorded after it: the event the layer's
// device→staging copies must follow.
func (c *checker) computed(r *request, k int, ev gpu.Event) {
	if k >= 0 && k < len(r.computed) {
		r.computed[k] = ev
	}
}

// waitedFor is the copy stream put behind ev (gpu.Waiter): everything
// queued on it from now on runs after ev resolved.
func (c *checker) waitedFor(ev gpu.Event) {
	if c.computeStream != nil && ev.StreamID() == c.computeStream.ID() {
		c.waited = max(c.waited, ev.Seq())
	}
}

// behindCompute reports whether a copy of layer k of r's rows queued now
// can only run once the layer was computed: the layer's compute event is
// one the copy stream waits for, or the device says it completed already.
// A layer never computed has no such event: a copy of it is early.
func (c *checker) behindCompute(r *request, k int) bool {
	ev := r.computed[k]
	if ev.IsZero() {
		return false
	}
	if c.waited >= ev.Seq() {
		return true
	}
	st, err := c.computeStream.Query(ev)
	return err == nil && st == gpu.Complete
}

// submittedPublish checks a layerwise publish as the backend is handed it:
// every unit is one of the publish's rows, and every layer of that row was
// copied behind its compute, its copy event completed on the device, and
// the slot holds the content the compute produced.
func (c *checker) submittedPublish(l *lease, ext contract.CacheExtent) {
	if c.computeStream == nil || l.kind != readiness.Publish {
		return
	}
	c.publishesSeen++
	if l.withdrawn {
		c.withdrawnSent++
	}
	r := l.req
	blocks := len(r.names[0])
	want := make([]byte, SlotBytes)
	lb := c.cfg.layerBytes()
	rows := 0
	for _, ords := range l.needed {
		rows += len(ords)
	}
	for _, u := range ext.All() {
		rows--
		g, b, ok := r.find(u.Name)
		row, inMem := c.mem.Row(u.LocalGroup, u.Local)
		if !ok || !inMem {
			c.unitsIncomplete++
			continue
		}
		content(u.Name, want)
		i := g*blocks + b
		whole := true
		for j := range c.cfg.LayersPerGroup {
			k := g + j*c.cfg.Groups
			sc := r.saves[i*c.layers+k]
			if !sc.queued || !sc.ordered || !c.copyLanded(sc.ev) || !bytes.Equal(row[j*lb:(j+1)*lb], want[j*lb:(j+1)*lb]) {
				whole = false
			}
		}
		if !whole {
			c.unitsIncomplete++
		}
	}
	c.unitsIncomplete += max(0, rows) // rows of the publish the backend was not handed
}

// copyLanded asks the copy stream itself whether ev completed.
func (c *checker) copyLanded(ev gpu.Event) bool {
	if ev.IsZero() {
		return false
	}
	st, err := c.copyStream.Query(ev)
	return err == nil && st == gpu.Complete
}

// withdrawnEnded checks a layerwise publish the manager released before its
// last layer, as its slots return: every copy queued for it had landed (the
// device says so), so that none is left to write into slots another lease
// may hold next. That the backend never saw it is checked at submission.
func (c *checker) withdrawnEnded(l *lease) {
	if c.computeStream == nil || !l.withdrawn {
		return
	}
	c.withdrawals++
	if l.copyUnrecorded {
		c.withdrawnEarly++
		return
	}
	for _, sc := range l.req.saves {
		if sc.queued && !c.copyLanded(sc.ev) {
			c.withdrawnEarly++
			return
		}
	}
}

// forget drops an ended request's device rows: the device memory is freed
// and may carry a later request.
func (c *checker) forget(r *request, rows int) {
	for i := range rows {
		delete(c.rowOwner, r.dev+gpu.DevicePtr(i*SlotBytes))
	}
}

// granted records that l now holds runs. A slot whose previous tenant was not
// fenced has been recycled before its fence.
func (c *checker) granted(l *lease, runs []staging.Run) {
	for _, r := range runs {
		for s := r.First; s < r.First+r.Count; s++ {
			c.claim(l, slotKey{r.Group, s})
		}
	}
}

// exposed records the slots a submission names: they are l's. For a fetch the
// engine submits in the round that grants, before the manager can ask which
// slots were granted, so this is the checker's first sight of the grant.
func (c *checker) exposed(l *lease, slots []slotKey) {
	for _, k := range slots {
		c.claim(l, k)
	}
}

func (c *checker) claim(l *lease, k slotKey) {
	if k.g < 0 || k.g >= len(c.tenant) || k.s < 0 || k.s >= len(c.tenant[k.g]) {
		return
	}
	prev := c.tenant[k.g][k.s]
	if prev.l == l {
		return // seen already
	}
	t := tenancy{l: l}
	if prev.l != nil && !c.fenced(prev.l) {
		t.flagged = true
		c.recycledBeforeFence++
		c.regrantsUnproven++
	}
	c.tenant[k.g][k.s] = t
	c.grants++
}

// snapshot copies the bytes of the slots, before a delivery lands.
func (c *checker) snapshot(slots []slotKey) [][]byte {
	out := make([][]byte, len(slots))
	for i, k := range slots {
		if row, ok := c.mem.Row(k.g, k.s); ok {
			out[i] = bytes.Clone(row)
		}
	}
	return out
}

// landed compares the slots after a delivery with their bytes before it. A
// slot that changed while another lease held it received a late write: the
// slot was recycled before its previous tenant's access was over.
func (c *checker) landed(d *delivery, before [][]byte) {
	for i, k := range d.slots {
		row, ok := c.mem.Row(k.g, k.s)
		if !ok || before[i] == nil || bytes.Equal(before[i], row) {
			continue
		}
		t := &c.tenant[k.g][k.s]
		if t.l == d.l || t.l == nil {
			continue
		}
		c.lateWrites++
		if !t.flagged {
			t.flagged = true
			c.recycledBeforeFence++
		}
	}
}

// reported checks a reported outcome against what the backend answered.
func (c *checker) reported(l *lease) {
	switch o := l.backend.(type) {
	case contract.Delivered:
		if o.Served.Len() == 0 && l.outcome.Failure() && l.outcome != readiness.TimedOut && l.outcome != readiness.Cancelled {
			c.missesAsFailures++
		}
	case contract.Failed, contract.Cancelled:
		if l.outcome == readiness.Missed {
			c.failuresAsMisses++
		}
	}
}

// verifyFetch reads a fetched request's device rows once the manager says its
// copies have landed: a row the backend served holds its content, every other
// row still holds the canary the checker wrote. It also checks the readiness
// claim: at both ends of the interval, every block a resume there reads, past
// the known blocks, was served. Rows a window group never staged are read by
// no resume at the interval's ends, so they are not missing.
func (c *checker) verifyFetch(dev gpu.Device, l *lease) {
	var served contract.NameSet
	if d, ok := l.backend.(contract.Delivered); ok && (l.outcome == readiness.Served || l.outcome == readiness.Partial) {
		served = d.Served
	}
	if c.overclaimed(l, served, l.interval.RestartFloor) || c.overclaimed(l, served, l.interval.UsableUntil) {
		c.overclaims++
	}
	blocks := len(l.req.names[0])
	want := make([]byte, SlotBytes)
	got := make([]byte, SlotBytes)
	for g := range l.req.names {
		for b := l.first; b < l.first+l.blocks; b++ {
			n := l.req.names[g][b]
			if served.Has(n) {
				content(n, want)
			} else {
				canary(l.req.id, g*blocks+b, want)
			}
			if dev.Read(got, l.req.row(blocks, g, b)) != nil {
				continue // a lost device can no longer be read
			}
			c.rowsVerified++
			if !bytes.Equal(got, want) {
				c.corruptRows++
			}
		}
	}
}

// readLayer is the manager reading layer k of the fetch l's device rows
// once it was told the layer is ready: every row of the layer's group that
// the backend served. The checker reads them and asks the device itself,
// not the engine, whether the layer's copy into each row had landed: the
// event recorded after that copy has completed. A row with no such copy, or
// whose event is still pending, was read before its bytes arrived; a row
// whose bytes are not its content is corrupt.
func (c *checker) readLayer(dev gpu.Device, l *lease, k int) {
	var served contract.NameSet
	if d, ok := l.backend.(contract.Delivered); ok {
		served = d.Served
	}
	g, j := c.cfg.layerOf(k)
	if g >= len(l.needed) {
		return
	}
	lb := c.cfg.layerBytes()
	blocks := len(l.req.names[0])
	want := make([]byte, SlotBytes)
	got := make([]byte, lb)
	read, early, corrupt := false, false, false
	for _, b := range l.needed[g] {
		n := l.req.names[g][b]
		if !served.Has(n) {
			continue
		}
		i := g*blocks + b
		ev := l.req.layerCopies[i*c.layers+k]
		if ev.IsZero() {
			early = true
		} else if st, err := c.copyStream.Query(ev); err != nil || st != gpu.Complete {
			early = true
		}
		if dev.Read(got, l.req.row(blocks, g, b)+gpu.DevicePtr(j*lb)) != nil {
			continue // a lost device can no longer be read
		}
		read = true
		content(n, want)
		if !bytes.Equal(got, want[j*lb:(j+1)*lb]) {
			corrupt = true
		}
	}
	if !read {
		return // no row of the layer's group was served: nothing to read
	}
	c.layersRead++
	if early {
		c.layersReadEarly++
	}
	if corrupt {
		c.corruptLayers++
	}
}

// overclaimed reports whether a resume at token position p reads a block of
// the fetch's range that was not served. Full attention reads every block
// below p; the window group its sink blocks and the blocks holding one of the
// positions the next token attends, p−window+1 … p−1.
func (c *checker) overclaimed(l *lease, served contract.NameSet, p int) bool {
	if p%TokensPerBlock != 0 {
		return true // readiness answers whole blocks
	}
	groups := len(l.req.names)
	for g := range groups {
		for b := l.first; b < p/TokensPerBlock; b++ {
			windowed := c.window > 0 && g == groups-1
			reads := !windowed || b < c.sinks || (b+1)*TokensPerBlock > p-c.window+1
			if reads && (b >= len(l.req.names[g]) || !served.Has(l.req.names[g][b])) {
				return true
			}
		}
	}
	return false
}

// storeNames lists a request's names, group by group, block by block.
func storeNames(r *request) []contract.Name {
	out := make([]contract.Name, 0, len(r.names)*len(r.names[0]))
	for g := range r.names {
		out = append(out, r.names[g]...)
	}
	return out
}

// verifyStore checks what the store holds for names (values[i] for names[i];
// nil where it holds nothing): every stored row must be the content its name
// derives. err says the store could not be read: nothing is verified, and the
// check is counted as failed.
func (c *checker) verifyStore(names []contract.Name, values [][]byte, err error) {
	if err != nil {
		c.storeChecksFailed++
		return
	}
	want := make([]byte, SlotBytes)
	for i, n := range names {
		got := values[i]
		if got == nil {
			continue
		}
		content(n, want)
		c.rowsVerified++
		if !bytes.Equal(got, want) {
			c.corruptRows++
		}
	}
}

// slotOf finds the staging slot a host slice starts in.
func (c *checker) slotOf(b []byte) (slotKey, bool) {
	if len(b) == 0 {
		return slotKey{}, false
	}
	addr := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	for g, p := range c.parts {
		if addr >= p.Address && addr < p.Address+p.NBytes {
			return slotKey{g, (addr - p.Address) / p.SlotBytes}, true
		}
	}
	return slotKey{}, false
}

// copied attributes a copy between a staging slot and a device row to the
// lease that moves that row. A copy may cover part of a row (a layer's
// bytes): rows start SlotBytes apart from an allocation that both devices
// align to 256 bytes, so the row holding dev starts at dev rounded down.
func (c *checker) copied(host []byte, dev gpu.DevicePtr, toDevice bool) {
	if _, ok := c.slotOf(host); !ok {
		return
	}
	row := dev - dev%SlotBytes
	r := c.rowOwner[row]
	if r != nil && toDevice && c.layers > 0 {
		c.layerCopied(r, row, int(dev-row), len(host))
	}
	if r != nil && !toDevice && c.computeStream != nil {
		c.layerSaved(r, row, int(dev-row), len(host))
	}
	var l *lease
	if r != nil {
		l = r.pub
		if toDevice {
			l = r.fetch
		}
	}
	if l == nil {
		c.strayCopy++
		return
	}
	if !l.copyUnrecorded {
		l.copyUnrecorded = true
		c.unrecord = append(c.unrecord, l)
	}
}

// layerCopied notes which layers a copy of n bytes at off into row of r
// carries, by the checker's own reading of the row: layer group g's rows
// hold its layers one after another, layerBytes each.
func (c *checker) layerCopied(r *request, row gpu.DevicePtr, off, n int) {
	i := int(row-r.dev) / SlotBytes
	g := i / c.cfg.Blocks
	lb := c.cfg.layerBytes()
	for j := off / lb; j <= (off+n-1)/lb && j < c.cfg.LayersPerGroup; j++ {
		c.unrecordLayers = append(c.unrecordLayers, layerCopy{r, i*c.layers + g + j*c.cfg.Groups})
	}
}

// layerSaved notes which layers of which row a device→staging copy
// carries, by the same arithmetic, and whether it was queued behind each
// layer's compute: one that was not may run before the compute wrote the
// bytes it stages.
func (c *checker) layerSaved(r *request, row gpu.DevicePtr, off, n int) {
	i := int(row-r.dev) / SlotBytes
	g := i / c.cfg.Blocks
	lb := c.cfg.layerBytes()
	for j := off / lb; j <= (off+n-1)/lb && j < c.cfg.LayersPerGroup; j++ {
		k := g + j*c.cfg.Groups
		sc := &r.saves[i*c.layers+k]
		sc.queued = true
		sc.ordered = c.behindCompute(r, k)
		c.layerSaves++
		if !sc.ordered {
			c.savesEarly++
		}
		c.unrecordSaves = append(c.unrecordSaves, layerCopy{r, i*c.layers + k})
	}
}

func (c *checker) recorded(ev gpu.Event) {
	for _, lc := range c.unrecordSaves {
		lc.r.saves[lc.i].ev = ev
	}
	clear(c.unrecordSaves)
	c.unrecordSaves = c.unrecordSaves[:0]
	for _, lc := range c.unrecordLayers {
		lc.r.layerCopies[lc.i] = ev
	}
	clear(c.unrecordLayers)
	c.unrecordLayers = c.unrecordLayers[:0]
	for _, l := range c.unrecord {
		l.copyUnrecorded = false
		l.copySeqs = append(l.copySeqs, ev.Seq())
	}
	clear(c.unrecord)
	c.unrecord = c.unrecord[:0]
}

func (c *checker) queried(ev gpu.Event, st gpu.Status) {
	switch st {
	case gpu.Complete:
		c.completed = max(c.completed, ev.Seq())
	case gpu.Failed:
		c.completed = max(c.completed, ev.Seq())
		c.failed[ev.Seq()] = true
	}
}

// stream lets the checker see every copy between staging and the device, and
// every event's completion.
type stream struct {
	inner gpu.Stream
	chk   *checker
	mu    *sync.Mutex // the driver's lock
}

var _ gpu.Stream = (*stream)(nil)

func (s *stream) ID() uint64 { return s.inner.ID() }

func (s *stream) CopyHtoD(dst gpu.DevicePtr, src []byte) error {
	err := s.inner.CopyHtoD(dst, src)
	if err == nil {
		s.mu.Lock()
		s.chk.copied(src, dst, true)
		s.mu.Unlock()
	}
	return err
}

func (s *stream) CopyDtoH(dst []byte, src gpu.DevicePtr) error {
	err := s.inner.CopyDtoH(dst, src)
	if err == nil {
		s.mu.Lock()
		s.chk.copied(dst, src, false)
		s.mu.Unlock()
	}
	return err
}

func (s *stream) Record() (gpu.Event, error) {
	ev, err := s.inner.Record()
	if err == nil {
		s.mu.Lock()
		s.chk.recorded(ev)
		s.mu.Unlock()
	}
	return ev, err
}

// Wait puts the copy stream behind ev, an event of another stream of the
// device (a layerwise publish's compute), where the device can.
func (s *stream) Wait(ev gpu.Event) error {
	w, ok := s.inner.(gpu.Waiter)
	if !ok {
		return fmt.Errorf("simulate: the copy stream (%T) cannot wait for %v", s.inner, ev)
	}
	err := w.Wait(ev)
	if err == nil {
		s.mu.Lock()
		s.chk.waitedFor(ev)
		s.mu.Unlock()
	}
	return err
}

func (s *stream) Query(ev gpu.Event) (gpu.Status, error) {
	st, err := s.inner.Query(ev)
	if err == nil {
		s.mu.Lock()
		s.chk.queried(ev, st)
		s.mu.Unlock()
	}
	return st, err
}

func (s *stream) Addressable(p gpu.DevicePtr, n int) error { return s.inner.Addressable(p, n) }
