package transfer_test

import (
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"
	"github.com/stretchr/testify/require"
)

// t0 is the time every test starts at; times are given as offsets from it.
var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// tb is what the helpers need of a test: *testing.T and *rapid.T both.
type tb interface {
	Helper()
	require.TestingT
}

// local is this side's advertisement in the tests: everything.
var local = transfer.Capabilities{Peer: "decode-0", Incarnation: 1, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}

// agree negotiates with peer#inc advertising supported, failing the test if
// the negotiation is refused.
func agree(t tb, peer transfer.Peer, inc transfer.Incarnation, supported transfer.CapabilitySet) transfer.Agreement {
	t.Helper()
	a, err := transfer.Negotiate(local, transfer.Capabilities{Peer: peer, Incarnation: inc, Version: transfer.ProtocolVersion, Supported: supported}, 0)
	require.NoError(t, err)
	return a
}

var (
	kv0  = transfer.AccessorID{Peer: "prefill-a", Rank: 0, Role: transfer.RoleKV}
	aux0 = transfer.AccessorID{Peer: "prefill-a", Rank: 0, Role: transfer.RoleAux}
	kv1  = transfer.AccessorID{Peer: "prefill-b", Rank: 1, Role: transfer.RoleKV}
)

var key1 = transfer.SessionKey{Request: 7, Attempt: 1}

// config is a session of key1 over tokens [0,64), submitted at 0 with its
// deadline at 100 and containment at 200, whose accessors' peers advertise
// every capability (incarnation 1 for prefill-a, 2 for prefill-b).
func config(t testing.TB, leased bool, ids ...transfer.AccessorID) transfer.CohortConfig {
	t.Helper()
	return configCaps(t, leased, transfer.KnownCapabilities, ids...)
}

func configCaps(t testing.TB, leased bool, supported transfer.CapabilitySet, ids ...transfer.AccessorID) transfer.CohortConfig {
	t.Helper()
	cfg := transfer.CohortConfig{
		Session: key1, Tokens: transfer.TokenRange{Start: 0, End: 64}, Leased: leased,
		Submitted: at(0), Deadline: at(100), Containment: at(200),
	}
	for _, id := range ids {
		cfg.Accessors = append(cfg.Accessors, transfer.AccessorSpec{ID: id, Agreement: agree(t, id.Peer, incOf(id.Peer), supported)})
	}
	return cfg
}

func incOf(p transfer.Peer) transfer.Incarnation {
	if p == "prefill-b" {
		return 2
	}
	return 1
}

func cohort(t testing.TB, cfg transfer.CohortConfig) *transfer.Cohort {
	t.Helper()
	c, err := transfer.NewCohort(at(0), cfg)
	require.NoError(t, err)
	return c
}

// ev is evidence of kind from id about key1, from id's peer's incarnation.
func ev(kind transfer.EvidenceKind, id transfer.AccessorID, tokenEnd int64) transfer.Evidence {
	e := transfer.Evidence{Kind: kind, Session: key1, Accessor: id, Incarnation: incOf(id.Peer)}
	if kind == transfer.Report || kind == transfer.Done {
		e.TokenEnd = tokenEnd
	}
	if kind == transfer.Failure {
		e.Reason = "remote access error"
	}
	return e
}
