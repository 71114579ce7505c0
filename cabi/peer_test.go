package main

import (
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/readiness"
)

// peerStatsNotInC is every counter of peer.ReceiverStats and
// peer.SenderStats that kvready_peer_stats does not carry, with its reason.
// A counter added to either that is in neither this list nor the C struct
// fails TestEveryPeerCounterReachesC.
var peerStatsNotInC = map[string]string{
	"SettleSum":    "a distribution's sum: package metrics exports the histogram; C carries its count (settled)",
	"Malformed":    "diagnostic: the metrics exporter's; refused and peers_lost are what an owner acts on",
	"Impersonated": "diagnostic, as Malformed",
	"Cancels":      "coordinated cancellation's own counts: the metrics exporter's (WatchTransfers)",
	"Unsent":       "as Cancels",
	"Held":         "as Cancels: offers held for a publish not yet submitted",
	"Tombstones":   "as Cancels",
	"Ignored":      "as Cancels",
	"Finals":       "as Cancels",
}

// peerRenames are the counters whose kvready_peer_stats field is not their
// name in snake case.
var peerRenames = map[string]string{"Settle": "settled", "Dropped": "refused"}

// Every counter of a Receiver's and a Sender's stats, filled with a distinct
// value, reaches the kvready_peer_stats field of its name (or its rename)
// through receiverStatsToC / senderStatsToC — the histogram Settle as its
// count —, or is declared left out; and the fields a side does not fill stay
// 0, so an owner reading the other side's field reads nothing made up.
func TestEveryPeerCounterReachesC(t *testing.T) {
	for _, side := range []struct {
		name  string
		stats any
		toC   func(v reflect.Value) any
	}{
		{"receiver", &peer.ReceiverStats{}, func(v reflect.Value) any { return receiverStatsToC(v.Interface().(peer.ReceiverStats)) }},
		{"sender", &peer.SenderStats{}, func(v reflect.Value) any { return senderStatsToC(v.Interface().(peer.SenderStats)) }},
	} {
		t.Run(side.name, func(t *testing.T) {
			sv := reflect.ValueOf(side.stats).Elem()
			want := map[string]int64{}
			for i := range sv.NumField() {
				f, fv := sv.Type().Field(i), sv.Field(i)
				value := int64(1000 + 10*i)
				switch fv.Kind() {
				case reflect.Array: // the histogram: its buckets sum to value
					fv.Index(0).SetUint(uint64(value - 1))
					fv.Index(fv.Len() - 1).SetUint(1)
				case reflect.Int64:
					fv.SetInt(value)
				default:
					fv.SetUint(uint64(value))
				}
				if _, skip := peerStatsNotInC[f.Name]; skip {
					continue
				}
				cname := snake(f.Name)
				if r, ok := peerRenames[f.Name]; ok {
					cname = r
				}
				want[cname] = value
			}
			cv := reflect.ValueOf(side.toC(sv))
			for i := range cv.NumField() {
				name := cv.Type().Field(i).Name
				got := intOf(cv.Field(i))
				if w, ok := want[name]; ok {
					assert.Equal(t, w, got, "%s stats: kvready_peer_stats.%s", side.name, name)
					delete(want, name)
				} else {
					assert.Zero(t, got, "%s stats: kvready_peer_stats.%s is no counter of a %s, yet it is %d", side.name, name, side.name, got)
				}
			}
			assert.Empty(t, want, "%s counters with no kvready_peer_stats field (add one to kvready.h, _abi.py's CPeerStats, python's PeerStats and %sStatsToC, or declare it in peerStatsNotInC)", side.name, side.name)
		})
	}
}

// kvready_peer_config_defaults fills what kvready.h says each field
// defaults to, in the units the header names.
func TestPeerConfigDefaultsAreTheHeaders(t *testing.T) {
	header, err := os.ReadFile("kvready.h")
	require.NoError(t, err)
	body := string(header)
	body = body[strings.Index(body, "typedef struct kvready_peer_config {"):]
	body = body[:strings.Index(body, "} kvready_peer_config;")]
	d := reflect.ValueOf(peerDefaults())
	units := map[string]time.Duration{"": 1, "s": time.Second, "h": time.Hour}
	said := 0
	for _, field := range []string{"timeout_ns", "grace_ns", "window_ns", "sessions", "tombstones"} {
		m := regexp.MustCompile(`\b` + field + `;[^\n]*\((\d+)(?: (s|h))?\)`).FindStringSubmatch(body)
		if !assert.NotNil(t, m, "kvready.h states no default of kvready_peer_config.%s as (N [unit])", field) {
			continue
		}
		said++
		n, _ := strconv.ParseInt(m[1], 10, 64)
		assert.Equal(t, n*int64(units[m[2]]), intOf(d.FieldByName(field)), "kvready.h's default of %s", field)
	}
	assert.Equal(t, 5, said)
	// With both defaults the receiver gives up within the engine's horizon
	// (docs/transfers.md: otherwise the engine contains first).
	e := readiness.Defaults()
	peerHorizon := time.Duration(intOf(d.FieldByName("timeout_ns")) + intOf(d.FieldByName("grace_ns")))
	assert.LessOrEqual(t, peerHorizon, e.RequestTimeout+e.DrainGrace, "the peer defaults' timeout + grace; the engine's request_timeout + drain_grace")
	assert.EqualValues(t, 1, intOf(d.FieldByName("leased")), "leased defaults to 1: each session under its own registration")
	assert.Zero(t, intOf(d.FieldByName("poll_ns")), "poll_ns defaults to 0: the owner progresses")
	assert.Zero(t, intOf(d.FieldByName("transport")), "the defaults name no transport")
}
