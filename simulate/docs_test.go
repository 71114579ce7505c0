package simulate

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// defaultsSentence is what README.md and docs/simulate.md must say about
// containment under the defaults, given a run of the defaults.
func defaultsSentence(s *Summary) string {
	if s.SlotsQuarantined == 0 && s.Containments == 0 {
		return "With the defaults nothing is contained: slots quarantined 0, containments 0."
	}
	return "With the defaults some leases are contained: slots are quarantined."
}

// The docs say what the defaults do: the demo's run (the defaults, as
// `make demo` runs them) contains nothing, and the docs say so in those
// words; they claim no injected "Quiesce answering false" unless the
// defaults inject it, and name "not yet" when they inject that.
func TestDocsSayWhatTheDefaultsDo(t *testing.T) {
	c := Defaults()
	s := run(t, c)
	require.True(t, s.Safe())
	want := defaultsSentence(s)
	space := regexp.MustCompile(`\s+`)
	for _, doc := range []string{"../README.md", "../docs/simulate.md"} {
		data, err := os.ReadFile(doc)
		require.NoError(t, err)
		text := space.ReplaceAllString(string(data), " ")
		assert.Contains(t, text, want, "%s: the run of the defaults quarantined %d slots in %d containments", doc, s.SlotsQuarantined, s.Containments)
		if c.NeverProvesRate == 0 {
			assert.NotContains(t, text, "Quiesce answering false)", "%s: the defaults never inject Quiesce answering false", doc)
			assert.NotContains(t, text, "quarantined (Quiesce false", doc)
		}
		if c.QuiesceNotYetRate > 0 {
			assert.Contains(t, strings.ToLower(text), `quiesce answering "not yet"`, doc)
		}
	}
}

// docs/simulate.md says what a layerwise run of the defaults measures:
// about half the requests' fetches timed both ways, layer by layer about
// 1.3× faster than the whole lease first.
func TestDocsSayWhatTheLayerwiseDefaultsDo(t *testing.T) {
	s := run(t, Defaults().WithLayerwiseDefaults())
	require.True(t, s.Safe())
	assert.InDelta(t, 0.5, float64(s.Forwards)/float64(s.Requests), 0.1, "%d passes measured of %d requests", s.Forwards, s.Requests)
	assert.InDelta(t, 1.3, s.LayerwiseSpeedup, 0.05)
	data, err := os.ReadFile("../docs/simulate.md")
	require.NoError(t, err)
	text := regexp.MustCompile(`\s+`).ReplaceAllString(string(data), " ")
	assert.Contains(t, text, "With the defaults the passes measured are about half the requests and layer by layer is about 1.3× faster.")
}
