package transfer_test

import (
	"errors"
	"testing"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The names are the reference's, and the bits are stable: the wire carries
// them.
func TestCapabilityNames(t *testing.T) {
	assert.Equal(t, "ATTEMPT_IDENTITY", transfer.AttemptIdentity.String())
	assert.Equal(t, "TERMINAL_RESULT_REPLAY", transfer.TerminalResultReplay.String())
	assert.Equal(t, transfer.Capability(8), transfer.PerOperationQuiescence)
	assert.Equal(t, transfer.CapabilitySet(1<<18-1), transfer.KnownCapabilities)
	assert.Equal(t, "capability(40)", transfer.Capability(40).String())
	assert.Equal(t, "none", transfer.CapabilitySet(0).String())
	assert.Equal(t, "ATTEMPT_IDENTITY, MULTI_WRITER, capability(40)",
		(transfer.Caps(transfer.MultiWriter, transfer.AttemptIdentity) | 1<<40).String())
	s := transfer.Caps(transfer.MultiWriter)
	assert.True(t, s.Has(transfer.MultiWriter))
	assert.False(t, s.Has(transfer.AttemptIdentity))
	assert.False(t, s.Has(200), "a capability beyond the set's width is never in it")
	assert.Equal(t, transfer.Caps(transfer.AttemptIdentity), s.Missing(transfer.Caps(transfer.AttemptIdentity, transfer.MultiWriter)))
}

// Negotiate refuses a peer lacking what sessions need, naming what is
// missing on which side and every mistake in the advertisements at once;
// it grants what both support, at the lower version.
func TestNegotiate(t *testing.T) {
	need := transfer.Caps(transfer.AttemptIdentity, transfer.EndpointIncarnation, transfer.ExactWriterTracking)
	peer := func(version uint16, supported transfer.CapabilitySet) transfer.Capabilities {
		return transfer.Capabilities{Peer: "prefill-a", Incarnation: 3, Version: version, Supported: supported}
	}
	for _, tc := range []struct {
		name          string
		local, remote transfer.Capabilities
		required      transfer.CapabilitySet
		missingRemote transfer.CapabilitySet
		missingLocal  transfer.CapabilitySet
		unknown       transfer.CapabilitySet
		mistakes      []string
		granted       transfer.CapabilitySet
	}{
		{name: "both support everything", local: local, remote: peer(1, transfer.KnownCapabilities), required: need, granted: transfer.KnownCapabilities},
		{name: "the peer lacks incarnations", local: local, remote: peer(1, need&^transfer.Caps(transfer.EndpointIncarnation)), required: need,
			missingRemote: transfer.Caps(transfer.EndpointIncarnation)},
		{name: "this side lacks multi-writer", local: transfer.Capabilities{Peer: "d", Incarnation: 1, Version: 1, Supported: need},
			remote: peer(1, transfer.KnownCapabilities), required: need | transfer.Caps(transfer.MultiWriter), missingLocal: transfer.Caps(transfer.MultiWriter)},
		{name: "a required capability unknown here", local: local, remote: peer(1, transfer.KnownCapabilities|1<<30), required: 1 << 30,
			unknown: 1 << 30},
		{name: "a newer peer's extra bits are dropped", local: local, remote: peer(4, need|1<<30), required: need, granted: need},
		{name: "advertisements with mistakes", local: transfer.Capabilities{Version: 1},
			remote: transfer.Capabilities{Peer: "prefill-a"}, required: 0,
			mistakes: []string{"local.peer", "local.incarnation", "remote.incarnation", "remote.version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := transfer.Negotiate(tc.local, tc.remote, tc.required)
			if tc.missingRemote == 0 && tc.missingLocal == 0 && tc.unknown == 0 && tc.mistakes == nil {
				require.NoError(t, err)
				assert.True(t, a.Valid())
				assert.Equal(t, tc.granted, a.Granted())
				assert.Equal(t, tc.remote.Peer, a.Peer())
				assert.Equal(t, tc.remote.Incarnation, a.Incarnation())
				assert.Equal(t, min(tc.local.Version, tc.remote.Version), a.Version())
				return
			}
			var ne *transfer.NegotiationError
			require.True(t, errors.As(err, &ne), "%v", err)
			assert.False(t, a.Valid(), "a refused negotiation is no agreement")
			assert.Equal(t, tc.missingRemote, ne.MissingRemote)
			assert.Equal(t, tc.missingLocal, ne.MissingLocal)
			assert.Equal(t, tc.unknown, ne.Unknown)
			var fields []string
			for _, m := range ne.Mistakes {
				fields = append(fields, m.Field)
			}
			assert.Equal(t, tc.mistakes, fields)
			for c := range transfer.Capability(18) {
				if (tc.missingRemote | tc.missingLocal).Has(c) {
					assert.Contains(t, err.Error(), c.String())
				}
			}
		})
	}
	assert.False(t, transfer.Agreement{}.Valid(), "the zero agreement is none")
}

func TestLogicalAndPhysicalNames(t *testing.T) {
	for _, tc := range []struct {
		p        transfer.Physical
		name     string
		reusable bool
	}{
		{0, "physical(0)", false},
		{transfer.NotExposed, "NOT_EXPOSED", true},
		{transfer.Active, "ACTIVE", false},
		{transfer.Quiescing, "QUIESCING", false},
		{transfer.QuiescedSuccess, "QUIESCED_SUCCESS", true},
		{transfer.QuiescedFailure, "QUIESCED_FAILURE", true},
		{transfer.InDoubt, "IN_DOUBT", false},
		{7, "physical(7)", false},
	} {
		assert.Equal(t, tc.name, tc.p.String())
		assert.Equal(t, tc.reusable, tc.p.Reusable(), "%v", tc.p)
		assert.Equal(t, tc.reusable, transfer.CancelResult{Physical: tc.p}.SafeToReuse())
	}
	for l, name := range map[transfer.Logical]string{0: "logical(0)", transfer.Accepted: "ACCEPTED",
		transfer.AlreadyTerminal: "ALREADY_TERMINAL", transfer.NotFound: "NOT_FOUND", transfer.Rejected: "REJECTED", 5: "logical(5)"} {
		assert.Equal(t, name, l.String())
	}
	assert.False(t, transfer.ShutdownResult{Physical: transfer.QuiescedSuccess, Fatal: true}.SafeToReleaseManagers())
	assert.False(t, transfer.ShutdownResult{Physical: transfer.InDoubt, InDoubt: 1}.SafeToReleaseManagers())
	assert.True(t, transfer.ShutdownResult{Physical: transfer.NotExposed}.SafeToReleaseManagers())
}
