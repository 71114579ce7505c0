package conformance

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/staging"
	"pgregory.net/rapid"
)

// kitUnit is one unit of a trial: where it lives and whether the store has it.
type kitUnit struct {
	Group, Slot int
	Name        contract.Name
	Stored      bool
	Content     []byte
}

// cancelPoint is when a trial asks a Cancellable attempt to cancel first.
type cancelPoint uint8

const (
	cancelNone         cancelPoint = iota // never
	cancelAfterSubmit                     // right after the submission, before the outcome
	cancelAfterOutcome                    // once Settle returned, before the proof
	cancelAfterProof                      // once Quiesce answered true
)

func (p cancelPoint) String() string {
	return [...]string{"none", "after_submit", "after_outcome", "after_proof"}[p]
}

// trial is one random extent over staging memory.
type trial struct {
	Groups, Slots, SlotBytes int
	Units                    []kitUnit
	IsLast                   bool
	// QuiesceFirst asks Quiesce right after the submission, before Settle,
	// while copies may still be pending.
	QuiesceFirst bool
	// Watched trials watch memory for the full window after the proof.
	Watched bool
	// Cancel is when a Cancellable attempt is first asked to cancel; every
	// trial that asks once asks again after the proof.
	Cancel cancelPoint
	// Layers, when set, makes the trial a layered one (layers.go): the
	// units go through a readiness engine that copies them to a simulated
	// device layer by layer. Its units are blocks 0..n-1 of every group.
	Layers [][]staging.LayerSpans
}

// GoString is how rapid prints a drawn trial: names as short hex prefixes.
func (tr trial) GoString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trial{groups %d, slots %d, %d-byte slots, is_last %v, quiesce_first %v, watched %v, cancel %v, ",
		tr.Groups, tr.Slots, tr.SlotBytes, tr.IsLast, tr.QuiesceFirst, tr.Watched, tr.Cancel)
	if tr.Layers != nil {
		fmt.Fprintf(&b, "through an engine with layers (%s), ", layersString(tr.Layers))
	}
	b.WriteString("units [")
	for i, u := range tr.Units {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(u.GoString())
	}
	b.WriteString("]}")
	return b.String()
}

// GoString prints a unit with its name as a short hex prefix.
func (u kitUnit) GoString() string {
	stored := "absent"
	if u.Stored {
		stored = "stored"
	}
	return fmt.Sprintf("(%d,%d) %s %s", u.Group, u.Slot, short(u.Name), stored)
}

// short is a name's first 4 bytes in hex, enough to tell a trial's names apart.
func short(n contract.Name) string { return fmt.Sprintf("%x…", n[:4]) }

const kitExtent = "kvready:conformance:1"

// trialGen draws trials; one in cfg.watchOneIn is watched, and one in
// layered goes through an engine with layers (0: none, and nothing is drawn
// for it). The draw shrinks towards a trial that is not watched, so shrinking
// a failure that does not need the window stays fast, and one that does
// keeps it.
func trialGen(cfg config, layered int) *rapid.Generator[trial] {
	return rapid.Custom(func(t *rapid.T) trial {
		tr := trial{
			Groups:       rapid.IntRange(1, 2).Draw(t, "groups"),
			Slots:        rapid.IntRange(2, 6).Draw(t, "slots"),
			SlotBytes:    rapid.SampledFrom([]int{8, 16, 64}).Draw(t, "slot_bytes"),
			IsLast:       rapid.Bool().Draw(t, "is_last"),
			QuiesceFirst: rapid.Bool().Draw(t, "quiesce_first"),
			Watched:      rapid.IntRange(0, cfg.watchOneIn-1).Draw(t, "watch") == cfg.watchOneIn-1,
			Cancel:       cancelPoint(rapid.IntRange(0, int(cancelAfterProof)).Draw(t, "cancel")),
		}
		allAbsent := rapid.IntRange(0, 3).Draw(t, "all_absent") == 0
		blocks := 0
		if layered > 0 && rapid.IntRange(0, layered-1).Draw(t, "layered") == 0 {
			tr.Layers = drawLayers(t, tr.Groups, tr.SlotBytes)
			blocks = rapid.IntRange(1, tr.Slots).Draw(t, "blocks")
		}
		for g := range tr.Groups {
			var used []int
			if tr.Layers != nil {
				used = make([]int, blocks) // blocks 0..n-1: an engine's request
				for b := range used {
					used[b] = b
				}
			} else {
				used = rapid.SliceOfNDistinct(rapid.IntRange(0, tr.Slots-1), 0, tr.Slots, rapid.ID[int]).Draw(t, fmt.Sprintf("slots%d", g))
			}
			for _, s := range used {
				var n contract.Name
				n[0], n[1], n[2] = 0xC1, byte(g), byte(s)
				n[3] = byte(rapid.IntRange(0, 255).Draw(t, "salt"))
				u := kitUnit{Group: g, Slot: s, Name: n, Stored: !allAbsent && rapid.Bool().Draw(t, "stored")}
				u.Content = make([]byte, tr.SlotBytes)
				for i := range u.Content {
					u.Content[i] = byte(g*61 + s*17 + i + 1)
				}
				tr.Units = append(tr.Units, u)
			}
		}
		return tr
	})
}

// kitMemory is the trial's staging memory: one slab per group, every byte a
// canary that names its own position until something writes it.
type kitMemory struct {
	slabs     [][]byte
	slotBytes int
	// at is where the last difference diff found lies (group, slot).
	at [2]int
}

func newKitMemory(tr trial) *kitMemory {
	m := &kitMemory{slotBytes: tr.SlotBytes}
	for range tr.Groups {
		m.slabs = append(m.slabs, make([]byte, tr.Slots*tr.SlotBytes))
	}
	for g, slab := range m.slabs {
		for i := range slab {
			slab[i] = canary(g, i)
		}
	}
	return m
}

func canary(g, i int) byte { return byte(0xA0 ^ g<<4 ^ i*7) }

// reused is the byte the kit writes at (g, i) when it takes the memory back
// after the proof, as a manager re-lends a slot: unlike the first canary and
// unlike any stored content, so a late write of either shows.
func reused(g, i int) byte { return byte(0x5B ^ g<<3 ^ i*13) }

// Row resolves a unit's coordinates to its row of the trial's memory.
func (m *kitMemory) Row(g, s int) ([]byte, bool) {
	if g < 0 || g >= len(m.slabs) || s < 0 || (s+1)*m.slotBytes > len(m.slabs[g]) {
		return nil, false
	}
	return m.slabs[g][s*m.slotBytes : (s+1)*m.slotBytes : (s+1)*m.slotBytes], true
}

func (m *kitMemory) snapshot() [][]byte {
	out := make([][]byte, len(m.slabs))
	for g, s := range m.slabs {
		out[g] = append([]byte(nil), s...)
	}
	return out
}

// reuse writes fresh canaries into every row — served, unserved and outside
// the extent — and returns what it wrote.
func (m *kitMemory) reuse() [][]byte {
	for g, slab := range m.slabs {
		for i := range slab {
			slab[i] = reused(g, i)
		}
	}
	return m.snapshot()
}

// diff describes the first byte that differs from snap, or "".
func (m *kitMemory) diff(snap [][]byte) string {
	for g, slab := range m.slabs {
		for i := range slab {
			if slab[i] != snap[g][i] {
				m.at = [2]int{g, i / m.slotBytes}
				return fmt.Sprintf("group %d slot %d byte %d: %#x, was %#x", g, i/m.slotBytes, i%m.slotBytes, slab[i], snap[g][i])
			}
		}
	}
	return ""
}

// watch reads the memory against want until window has passed, calling poke
// before every read (a late writer gets its chance at each call into the
// backend). It returns the first difference and how long after the start it
// was seen, or "" once the window has passed without one.
func (m *kitMemory) watch(want [][]byte, window time.Duration, poke func()) (string, time.Duration) {
	start := time.Now()
	deadline := start.Add(window)
	step := min(max(window/32, 200*time.Microsecond), 5*time.Millisecond)
	for {
		if poke != nil {
			poke()
		}
		if d := m.diff(want); d != "" {
			return d, time.Since(start)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return "", 0
		}
		time.Sleep(min(step, left))
	}
}

func (tr trial) extent() (contract.CacheExtent, []contract.Name, error) {
	units := make([]contract.Unit, len(tr.Units))
	names := make([]contract.Name, len(tr.Units))
	for i, u := range tr.Units {
		units[i] = contract.Unit{Name: u.Name, LocalGroup: u.Group, Local: u.Slot}
		names[i] = u.Name
	}
	ext, err := contract.NewCacheExtent([]byte(kitExtent), units, tr.IsLast)
	return ext, names, err
}

func (tr trial) inExtent(g, s int) (kitUnit, bool) {
	for _, u := range tr.Units {
		if u.Group == g && u.Slot == s {
			return u, true
		}
	}
	return kitUnit{}, false
}
