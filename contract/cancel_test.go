package contract_test

import (
	"errors"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SPEC §2 pins the suffixed revision byte for byte.
func TestRevisionCancelRequest(t *testing.T) {
	assert.Equal(t, "147ed68276e7fb89d5de60002d4e793a78707a8c+cancel-request-v1", contract.RevisionCancelRequest)
	assert.Equal(t, "147ed68276e7fb89d5de60002d4e793a78707a8c", contract.Revision)
}

func TestCancelDisposition(t *testing.T) {
	for _, tc := range []struct {
		d     contract.CancelDisposition
		name  string
		valid bool
	}{
		{contract.CancelRequested, "requested", true},
		{contract.CancelUnsupported, "unsupported", true},
		{0, "disposition(0)", false},
		{contract.CancelRequested + 1, "disposition(3)", false},
		{255, "disposition(255)", false},
	} {
		assert.Equal(t, tc.name, tc.d.String())
		assert.Equal(t, tc.valid, tc.d.Valid(), "%v", tc.d)
	}
	assert.NotEqual(t, contract.CancelRequested, contract.CancelUnsupported)
}

// plainAttempt has no cancellation.
type plainAttempt struct{}

func (plainAttempt) Poll() contract.Outcome { return nil }

// cancelAttempt answers what it is told to, counting calls.
type cancelAttempt struct {
	plainAttempt
	d     contract.CancelDisposition
	err   error
	calls int
}

func (c *cancelAttempt) RequestCancel() (contract.CancelDisposition, error) {
	c.calls++
	return c.d, c.err
}

type panickingAttempt struct{ plainAttempt }

func (panickingAttempt) RequestCancel() (contract.CancelDisposition, error) { panic("backend bug") }

// RequestCancel asks a Cancellable attempt, once per call, and passes its
// answer through unchanged; an ordinary attempt is Unsupported and nothing is
// asked.
func TestRequestCancel(t *testing.T) {
	d, err := contract.RequestCancel(plainAttempt{})
	require.NoError(t, err)
	assert.Equal(t, contract.CancelUnsupported, d)

	boom := errors.New("transport refused the cancel")
	for _, tc := range []struct {
		d   contract.CancelDisposition
		err error
	}{
		{contract.CancelRequested, nil},
		{contract.CancelUnsupported, nil},
		{contract.CancelRequested, boom},
		{0, nil}, // an invalid answer is passed through for the caller to judge
	} {
		c := &cancelAttempt{d: tc.d, err: tc.err}
		d, err := contract.RequestCancel(c)
		assert.Equal(t, tc.d, d)
		assert.Equal(t, tc.err, err)
		assert.Equal(t, 1, c.calls, "asked once per call")
	}

	assert.PanicsWithValue(t, "backend bug", func() { _, _ = contract.RequestCancel(panickingAttempt{}) },
		"RequestCancel recovers nothing: containing a backend's panic is the caller's job")
}
