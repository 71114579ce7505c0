package mem

import "strconv"

// Mode is how one submission behaves. The zero Mode is Normal.
//
// Every mode is correct: a fault or an adversarial timing that a backend
// keeping the contract may exhibit, which a correct engine must survive (and
// which kvready simulate injects). Behaviours that break the contract on
// purpose, for the conformance kit's own tests, are test support:
// backend/mem/memtest.
type Mode int

// The modes, in the order Modes returns them.
const (
	// Normal serves every unit the store holds (fetch) or stores every unit
	// (publish), then reports Delivered.
	Normal Mode = iota
	// Miss touches nothing and reports an empty Delivered: a miss (fetch) or an
	// unaccepted publication.
	Miss
	// Partial serves (or stores) only the first half, rounded up, of the units
	// it could serve, in extent order, and leaves the others untouched.
	Partial
	// Fail reports Failed("injected failure") and then, still before Quiesce
	// can answer true, fills every requested destination with Poison (failed
	// destinations are undefined; access may go on after the outcome).
	Fail
	// CancelLocal reports Cancelled{ByPeer: false}, then poisons like Fail.
	CancelLocal
	// CancelByPeer reports Cancelled{ByPeer: true}, then poisons like Fail.
	CancelByPeer
	// Reject refuses the submission with an error wrapping
	// contract.ErrSubmissionRejected; nothing is touched and no goroutine runs.
	Reject
	// QuiesceFalse delivers like Normal, but Quiesce on the attempt answers
	// false for ever.
	QuiesceFalse
	// QuiesceError delivers like Normal, but Quiesce on the attempt answers an
	// error for ever.
	QuiesceError
	// SlowQuiesce delivers like Normal, but Quiesce takes the backend's slow
	// quiesce duration longer (honouring ctx) before answering true.
	SlowQuiesce
	// QuiesceNotYet delivers like Normal, but the first N calls to Quiesce
	// that list the attempt answer false at once, without waiting (N is set by
	// WithQuiesceNotYet, default 2); later calls answer true once the
	// delivery's goroutine has ended. It models "false means not yet": a later
	// retry proves it. A call refused before answering (a context already
	// done, an attempt of another backend, another listed attempt's injected
	// error) is not counted.
	QuiesceNotYet
	// TornUntilQuiesce delivers like Normal and reports Delivered, but its
	// goroutine goes on touching the served rows until Quiesce is called for
	// the attempt (a retried or duplicated write, a lagging DMA). For a fetch
	// it rewrites every served staging row, alternately all Poison and the
	// true content, first Poison right after the outcome; for a publication it
	// keeps re-reading the published rows and never writes them. Each pass
	// resolves the units again from the extent it was handed. Quiesce stops
	// the passes, waits for the goroutine to end with the true content in
	// place, and answers true: bytes read from staging before that answer may
	// be torn, bytes read after it are exactly the stored content. A Quiesce
	// refused for a context already done does not stop the passes.
	// WithTornInterval paces them; TornPasses counts them.
	TornUntilQuiesce

	numModes
)

var modeNames = [numModes]string{
	"normal", "miss", "partial", "fail", "cancel-local", "cancel-by-peer", "reject",
	"quiesce-false", "quiesce-error", "slow-quiesce", "quiesce-not-yet", "torn-until-quiesce",
}

// String names the mode.
func (m Mode) String() string {
	if !m.Valid() {
		return "mode(" + strconv.Itoa(int(m)) + ")"
	}
	return modeNames[m]
}

// Valid reports a defined mode.
func (m Mode) Valid() bool { return m >= 0 && m < numModes }

// Modes returns every mode.
func Modes() []Mode {
	ms := make([]Mode, numModes)
	for i := range ms {
		ms[i] = Mode(i)
	}
	return ms
}
