package staging

import (
	"errors"
	"fmt"

	"github.com/kvready/kvready/contract"
)

// GroupRun is one layer group's rows in a lease: row i is block Ordinals[i], named
// Names[i], in the slot at Addresses[i] of part Part. Names and Addresses are
// both given or both nil (an unplaced run, which no extent can be built from).
type GroupRun struct {
	LayerGroup int
	Ordinals   []int
	Names      []contract.Name
	Addresses  []int
	Part       int
}

// Placed reports whether the run carries names and addresses.
func (r GroupRun) Placed() bool { return r.Names != nil || r.Addresses != nil }

// ErrDuplicateName is wrapped by the error of a view in which two rows share a
// name: a served set could not say which of them arrived.
var ErrDuplicateName = errors.New("staging: two rows of the view share a name")

// View is what a ready lease lends: at most one run per layer group. Its run
// slices are the caller's and must not change while the view is in use.
//
// Whether two rows share a name is found once, when the view is built, and
// remembered: [ServedMasksInto] and [ExtentBuilder] then need no set of their
// own. A view with duplicate names can be built, but neither will use it.
type View struct {
	runs []GroupRun
	rows int
	dup  error
	// index maps names to rows for views above quadraticRows rows; it is
	// built with the duplicate check and reused by Reset.
	index   nameIndex
	indexed bool
}

// NewView builds a view of runs; see [View.Reset].
func NewView(runs ...GroupRun) (*View, error) {
	v := &View{}
	if err := v.Reset(runs); err != nil {
		return nil, err
	}
	return v, nil
}

// Reset makes v a view of runs, reusing v's storage, so that a caller owning v
// builds views without allocating once it has seen its largest one. It refuses,
// leaving v unchanged, a negative layer group, one that appears twice, and a
// run whose Names or Addresses length differs from its Ordinals.
func (v *View) Reset(runs []GroupRun) error {
	rows := 0
	for i, r := range runs {
		if r.LayerGroup < 0 {
			return fmt.Errorf("staging: run %d has negative layer group %d", i, r.LayerGroup)
		}
		for j := range i {
			if runs[j].LayerGroup == r.LayerGroup {
				return fmt.Errorf("staging: runs %d and %d are both layer group %d; a view has at most one run per group", j, i, r.LayerGroup)
			}
		}
		if r.Placed() && (len(r.Names) != len(r.Ordinals) || len(r.Addresses) != len(r.Ordinals)) {
			return fmt.Errorf("staging: run %d (layer group %d) has %d ordinals, %d names and %d addresses; want as many of each",
				i, r.LayerGroup, len(r.Ordinals), len(r.Names), len(r.Addresses))
		}
		rows += len(r.Ordinals)
	}
	v.runs = append(v.runs[:0], runs...)
	v.rows = rows
	v.dup = v.findDuplicate()
	return nil
}

// quadraticRows is the row count up to which duplicates are found pairwise:
// cheaper than hashing there, and it needs no map.
const quadraticRows = 32

func (v *View) findDuplicate() error {
	v.indexed = false
	if v.rows <= quadraticRows {
		for i, r := range v.runs {
			for a, n := range r.Names {
				for b := a + 1; b < len(r.Names); b++ {
					if r.Names[b] == n {
						return v.dupError(i, a, i, b)
					}
				}
				for j := i + 1; j < len(v.runs); j++ {
					for b, m := range v.runs[j].Names {
						if m == n {
							return v.dupError(i, a, j, b)
						}
					}
				}
			}
		}
		return nil
	}
	v.indexed = true
	if ra, a, rb, b, dup := v.index.build(v.runs, v.rows); dup {
		return v.dupError(ra, a, rb, b)
	}
	return nil
}

func (v *View) dupError(i, a, j, b int) error {
	return fmt.Errorf("%w: row %d of run %d and row %d of run %d are both %s…",
		ErrDuplicateName, a, i, b, j, v.runs[i].Names[a].String()[:16])
}

// Runs returns the number of runs.
func (v *View) Runs() int { return len(v.runs) }

// Run returns run i, for 0 <= i < Runs(). Its slices are shared with the view.
func (v *View) Run(i int) GroupRun { return v.runs[i] }

// Rows returns the number of rows over all runs.
func (v *View) Rows() int { return v.rows }

// Duplicate returns the error describing two rows with one name, or nil.
func (v *View) Duplicate() error { return v.dup }
