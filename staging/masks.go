package staging

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/contract"
)

// ErrUnknownServed is wrapped by the error for a served name that is not in the
// view: the backend claims content the extent never asked for.
var ErrUnknownServed = errors.New("staging: a served name is not in the submitted view")

// ServedMasksInto turns Delivered.served into one arrival mask per run of view:
// row i of run r is true iff its name is served. It reuses dst's storage and
// returns the masks; it allocates nothing when dst already holds Runs() masks of
// enough capacity. Masks say what was delivered, nothing more: they never fill a
// hole, and readiness still waits for the local copies.
//
// It refuses a view with duplicate names and a served name not in the view. On
// error it returns nil and the contents of dst's storage are unspecified.
func ServedMasksInto(dst [][]bool, view *View, served contract.NameSet) ([][]bool, error) {
	if err := view.Duplicate(); err != nil {
		return nil, err
	}
	if cap(dst) < view.Runs() {
		dst = append(dst[:cap(dst)], make([][]bool, view.Runs()-cap(dst))...)
	}
	dst = dst[:view.Runs()]
	for i := range view.Runs() {
		r := view.Run(i)
		if !r.Placed() && len(r.Ordinals) > 0 {
			return nil, fmt.Errorf("%w: run %d (layer group %d) has no names to match", ErrUnplacedView, i, r.LayerGroup)
		}
		if cap(dst[i]) < len(r.Names) {
			dst[i] = make([]bool, len(r.Names))
		}
		dst[i] = dst[i][:len(r.Names)]
	}
	if view.indexed {
		return servedByIndex(dst, view, served)
	}
	hits := 0
	for i := range view.Runs() {
		r := view.Run(i)
		m := dst[i]
		for k := range r.Names {
			hit := served.Has(r.Names[k])
			m[k] = hit
			if hit {
				hits++
			}
		}
	}
	// The view's names are distinct, so every served name was counted at most
	// once; fewer hits than names means some served name is not in the view.
	if hits != served.Len() {
		return nil, unknownServed(view, served)
	}
	return dst, nil
}

// servedByIndex marks each served name's row through the view's name index:
// O(served names) hashes instead of a map lookup per row of the view.
func servedByIndex(dst [][]bool, view *View, served contract.NameSet) ([][]bool, error) {
	for i := range dst {
		clear(dst[i])
	}
	for n := range served.All() {
		run, row, ok := view.index.find(view.runs, &n)
		if !ok {
			return nil, fmt.Errorf("%w: %s…", ErrUnknownServed, n.String()[:16])
		}
		dst[run][row] = true
	}
	return dst, nil
}

// unknownServed finds a served name missing from the view, for the message.
// It runs only on the error path, so it may allocate.
func unknownServed(view *View, served contract.NameSet) error {
	known := make(map[contract.Name]struct{}, view.Rows())
	for i := range view.Runs() {
		for _, n := range view.Run(i).Names {
			known[n] = struct{}{}
		}
	}
	for n := range served.All() {
		if _, ok := known[n]; !ok {
			return fmt.Errorf("%w: %s…", ErrUnknownServed, n.String()[:16])
		}
	}
	return ErrUnknownServed // unreachable while the view's names are distinct
}

// ServedMasks is [ServedMasksInto] with fresh masks.
func ServedMasks(view *View, served contract.NameSet) ([][]bool, error) {
	return ServedMasksInto(nil, view, served)
}
