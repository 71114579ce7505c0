package ucxpipe

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/transfer"
	"github.com/kvready/kvready/transfer/ucx"
)

func newTransport(t *testing.T, name transfer.Peer) *ucx.Transport {
	t.Helper()
	tr, err := ucx.New(ucx.Config{Name: name, Incarnation: 1, Mode: ucx.Checked, Transports: "tcp"})
	require.NoError(t, err, "libucx-dev is needed (make deps installs it)")
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func caps(p transfer.Peer) transfer.Capabilities {
	return transfer.Capabilities{Peer: p, Incarnation: 1, Version: transfer.ProtocolVersion, Supported: transfer.KnownCapabilities}
}

// TestAnnounceThenJoin: what one side announces, the other joins, and its
// agreement gets the announced capabilities; input that does not decode is
// refused before anything is learnt or agreed.
func TestAnnounceThenJoin(t *testing.T) {
	a, b := newTransport(t, "a"), newTransport(t, "b")
	var out bytes.Buffer
	require.NoError(t, Announce(&out, a, caps("a")))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	addr, ok1 := strings.CutPrefix(lines[0], "addr ")
	cp, ok2 := strings.CutPrefix(lines[1], "caps ")
	require.True(t, ok1 && ok2, "%q", lines)

	agreed := 0
	agree := func(c transfer.Capabilities) error {
		agreed++
		assert.Equal(t, caps("a"), c)
		return nil
	}
	goodCaps, err := transfer.AppendCapabilities(nil, caps("a"))
	require.NoError(t, err)
	for _, tc := range []struct{ name, addr, caps string }{
		{"address not hex", "zz", cp},
		{"capabilities not hex", addr, "q"},
		{"capabilities not capabilities", addr, hex.EncodeToString([]byte("nope"))},
		{"address not an address", hex.EncodeToString([]byte("nope")), hex.EncodeToString(goodCaps)},
	} {
		assert.Error(t, Join(b, tc.addr, tc.caps, agree), tc.name)
	}
	assert.Zero(t, agreed, "nothing agreed on bad input")
	require.NoError(t, Join(b, addr, cp, agree))
	assert.Equal(t, 1, agreed)
}

// TestServe: every line goes to do, in order, and Serve returns when its
// input ends.
func TestServe(t *testing.T) {
	var got []string
	Serve(strings.NewReader("one\ntwo\n\nthree"), func(l string) { got = append(got, l) }, func() {})
	assert.Equal(t, []string{"one", "two", "", "three"}, got)
}
