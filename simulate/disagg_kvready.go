package simulate

import "errors"

// newKvreadyDisagg is the kvready manager of a disaggregated run.
func newKvreadyDisagg(*disaggDriver) (disaggManager, error) {
	return nil, errors.New("simulate: the kvready manager of --disagg runs the engine over backend/peer (issue #41 item 2), which this tree does not have yet; only --naive runs")
}
