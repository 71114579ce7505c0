package readiness

import (
	"fmt"
	"slices"

	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/fsm"
	"github.com/kvready/kvready/gpu"
	"github.com/kvready/kvready/staging"
)

// The copy effects: what the core asks its caller to copy between staging and
// the device, and when — a fetch's served rows only once access is fenced, a
// layer at a time (SPEC §4 rules 4 and 16).

// copyIn asks for a publish's device→staging copies: all of them, the rows
// whole, with one event; a layerwise publish's come layer by layer, as the
// owner reports each computed (copyLayer).
func (c *Core) copyIn(id uint32) {
	b := c.body(id)
	if b.byLayer {
		b.layers, b.landed, b.failed, b.queued = int32(c.Layers()), 0, 0, 0
		return
	}
	h := c.handle(id)
	for i := range b.rows {
		c.ready.Copies = append(c.ready.Copies, Copy{Lease: h, Row: i, Device: b.rows[i].Device, Staging: c.slot(b, i)})
	}
	c.ready.CopyLeases = append(c.ready.CopyLeases, h)
	c.ready.Layers = append(c.ready.Layers, LayerMark{Lease: h, After: len(c.ready.Copies)})
	b.copiesOut = int32(len(b.rows))
	b.layers, b.landed, b.failed = 1, 0, 0
}

// copyLayer asks for one computed layer's device→staging copies of every
// row of a layerwise publish, behind the owner's event, then the layer's
// event. Computed let only the next layer in.
func (c *Core) copyLayer(id uint32, v *verdict) {
	l := &c.leases[id]
	b := c.body(id)
	if withdrawn(l.m) {
		c.halt(fmt.Sprintf("layer %d's copies asked for of a publish its owner withdrew", v.layer), id)
		return
	}
	if !b.byLayer || v.layer != int(b.queued) || b.queued >= b.layers {
		c.halt(fmt.Sprintf("layer %d's copies asked for out of turn: a layerwise publish %v with %d of %d layers queued", v.layer, b.byLayer, b.queued, b.layers), id)
		return
	}
	h := c.handle(id)
	for i := range b.rows {
		r := &b.rows[i]
		slot := c.slot(b, i)
		for _, sp := range c.spans[r.Group][v.layer] {
			c.ready.Copies = append(c.ready.Copies, Copy{Lease: h, Row: i, Layer: v.layer,
				Device: r.Device + gpu.DevicePtr(sp.Offset), Staging: slot[sp.Offset:sp.End():sp.End()]})
			b.copiesOut++
		}
	}
	c.ready.Layers = append(c.ready.Layers, LayerMark{Lease: h, Layer: v.layer, After: len(c.ready.Copies), Behind: v.behind})
	c.copyLease(h)
	b.queued++
}

// endLayers ends a layerwise publish withdrawn before every layer was
// reported: it takes no more, and one event recorded after the copies
// already queued (an empty last layer) is the evidence that they landed,
// copies_landed. A publish that is not layerwise, or whose layers were all
// reported, has nothing to end.
func (c *Core) endLayers(id uint32) {
	b := c.body(id)
	if !b.byLayer || b.queued >= b.layers {
		return
	}
	h := c.handle(id)
	c.ready.Layers = append(c.ready.Layers, LayerMark{Lease: h, Layer: int(b.queued), After: len(c.ready.Copies)})
	c.copyLease(h)
	b.queued++
	b.layers = b.queued
}

// copyLease lists h among the leases with copies in this Ready, once.
func (c *Core) copyLease(h Handle) {
	if !slices.Contains(c.ready.CopyLeases, h) {
		c.ready.CopyLeases = append(c.ready.CopyLeases, h)
	}
}

// copyOut asks for a fetch's staging→device copies of its served whole rows:
// only ever after the fence, never for a lease the owner has released (the
// nothing_to_copy completion moved those on).
func (c *Core) copyOut(id uint32) {
	l := &c.leases[id]
	b := c.body(id)
	if !l.m.Marks.Has(fsm.Fenced) {
		c.halt("staging→device copies asked for before the backend's access was proven over", id)
		return
	}
	if l.m.Latched.Has(fsm.ReleaseRequested) {
		c.halt("staging→device copies asked for into the device rows of a lease its owner released", id)
		return
	}
	if l.kind != Fetch || !served(l.result) {
		c.halt(fmt.Sprintf("staging→device copies asked for a %v whose outcome is %v: only served rows are copied", l.kind, l.result), id)
		return
	}
	h := c.handle(id)
	rows := 0
	for i := range b.rows {
		if m := b.mask(i); m != nil && *m {
			rows++
		}
	}
	if rows == 0 {
		c.halt("a fenced lease with nothing to copy came to rest in access_fenced", id)
		return
	}
	if d, _ := b.first.(contract.Delivered); rows > d.Served.Len() {
		c.halt(fmt.Sprintf("staging→device copies asked for %d rows of a lease its backend served %d", rows, d.Served.Len()), id)
		return
	}
	// Layer by layer (rule 16): each layer's spans of every served row, then
	// the layer's mark, where its event is recorded.
	n := int32(0)
	layers := c.Layers()
	for k := range layers {
		for i := range b.rows {
			if m := b.mask(i); m == nil || !*m {
				continue
			}
			r := &b.rows[i]
			slot := c.slot(b, i)
			for _, sp := range c.spans[r.Group][k] {
				c.ready.Copies = append(c.ready.Copies, Copy{Lease: h, Row: i, Layer: k, ToDevice: true,
					Device: r.Device + gpu.DevicePtr(sp.Offset), Staging: slot[sp.Offset:sp.End():sp.End()]})
				n++
			}
		}
		c.ready.Layers = append(c.ready.Layers, LayerMark{Lease: h, Layer: k, After: len(c.ready.Copies)})
	}
	b.layers, b.landed, b.failed = int32(layers), 0, 0
	c.layerInterval(id)
	c.ready.CopyLeases = append(c.ready.CopyLeases, h)
	b.copiesOut = n
}

// layerInterval computes the interval a landed layer answers: that of the
// served rows whose copies the device did not refuse. It is computed when
// the copies are issued and again when one is refused, never when asked, so
// that asking costs O(1).
func (c *Core) layerInterval(id uint32) {
	b := c.body(id)
	iv, err := staging.WindowedReadinessOfView(c.cfg.TokensPerBlock, b.known, c.cfg.Attention, &b.view, b.masks)
	if err != nil {
		c.halt("readiness of a validated view is not computable: "+err.Error(), id)
		return
	}
	b.layerIv = iv
}
