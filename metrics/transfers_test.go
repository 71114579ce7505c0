package metrics_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/backend/peer"
	"github.com/kvready/kvready/metrics"
)

// The conversions an embedder writes over backend/peer's Stats compile: the
// types have the same fields, so a field added to one and not the other
// fails here.
var (
	_ = func(s peer.ReceiverStats) metrics.TransferReceiverStats { return metrics.TransferReceiverStats(s) }
	_ = func(s peer.SenderStats) metrics.TransferSenderStats { return metrics.TransferSenderStats(s) }
)

// transferNotExported is every field of the two transfer stats the
// collector does not export as a counter or gauge value of its own, with the
// reason. A field in neither the exposition nor this list fails
// TestEveryTransferCounterIsExported.
var transferNotExported = map[string]string{
	"Settle":    "the buckets of kvready_transfer_settle_latency_seconds (TestTransferSettleHistogram)",
	"SettleSum": "the sum of kvready_transfer_settle_latency_seconds (TestTransferSettleHistogram)",
}

// transferSeries gathers c and returns its kvready_transfer* counters and
// gauges as "family{label=value,...} value" lines, the device label aside.
func transferSeries(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	var out []string
	for _, mf := range gather(t, c) {
		if !strings.HasPrefix(mf.GetName(), "kvready_transfer") || mf.GetName() == "kvready_transfer_settle_latency_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "device" {
					ls = append(ls, lp.GetName()+"="+lp.GetValue())
				}
			}
			v := m.GetCounter().GetValue()
			if m.Gauge != nil {
				v = m.GetGauge().GetValue()
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(ls, ","), v))
		}
	}
	return out
}

// Every counter and gauge of both sides' stats is exported under its side:
// filled with a distinct value it shows in a series of that side, and
// changing it alone changes what a scrape sees. A new field neither exported
// nor listed in transferNotExported with its reason fails.
func TestEveryTransferCounterIsExported(t *testing.T) {
	var recv metrics.TransferReceiverStats
	var send metrics.TransferSenderStats
	c := shown(prometheus.Labels{"device": "0"}, handmade())
	c.WatchTransfers(func() metrics.TransferStats { return metrics.TransferStats{Receiver: &recv, Sender: &send} })
	for _, side := range []struct {
		name string
		v    reflect.Value
	}{{"receiver", reflect.ValueOf(&recv).Elem()}, {"sender", reflect.ValueOf(&send).Elem()}} {
		v := side.v
		distinct := func(i int) uint64 { return uint64(5_000_000 + 1000*i) }
		for i := range v.NumField() {
			if _, ok := transferNotExported[v.Type().Field(i).Name]; !ok {
				set(v.Field(i), distinct(i))
			}
		}
		base := transferSeries(t, c)
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if _, ok := transferNotExported[f.Name]; ok {
				continue
			}
			found := false
			for _, line := range base {
				found = found || (strings.Contains(line, "side="+side.name) && strings.HasSuffix(line, fmt.Sprintf(" %g", float64(distinct(i)))))
			}
			if !found {
				t.Errorf("%s stats %s = %d: no series of side %s carries it; export it (metrics/transfers.go) or list it in transferNotExported with the reason", side.name, f.Name, distinct(i), side.name)
				continue
			}
			old := reflect.ValueOf(v.Field(i).Interface())
			set(v.Field(i), distinct(i)+1)
			assert.NotEqual(t, base, transferSeries(t, c), "%s stats %s: changing it changes nothing a scrape sees", side.name, f.Name)
			v.Field(i).Set(old)
		}
	}
	for name := range transferNotExported {
		_, r := reflect.TypeOf(recv).FieldByName(name)
		_, s := reflect.TypeOf(send).FieldByName(name)
		assert.True(t, r || s, "transferNotExported lists %s, which neither side's stats has", name)
	}
}

// TestTransferSeries: each side's series carry what the source says at each
// scrape, under its side label; a side the engine lacks sends nothing; no
// source, no series.
func TestTransferSeries(t *testing.T) {
	recv := metrics.TransferReceiverStats{Evidence: 40, Refused: 3, Malformed: 1, Impersonated: 2, PeersLost: 1, Rejected: 4,
		Revocations: 9, Fenced: 8, Cancels: 11, Unsent: 1, InFlight: 5, InDoubt: 2, Delivered: 30, Failed: 6, Cancelled: 7}
	send := metrics.TransferSenderStats{Offers: 12, Held: 3, Dropped: 2, Puts: 48, PeersLost: 1, Rejected: 1,
		Cancels: 6, Tombstones: 2, Ignored: 3, Finals: 4, InFlight: 4, Delivered: 10, Failed: 1, Cancelled: 1}
	receiverLines := []string{
		"kvready_transfers_in_flight{side=receiver} 5",
		"kvready_transfers_in_doubt{side=receiver} 2",
		"kvready_transfer_outcomes_total{outcome=cancelled,side=receiver} 7",
		"kvready_transfer_outcomes_total{outcome=delivered,side=receiver} 30",
		"kvready_transfer_outcomes_total{outcome=failed,side=receiver} 6",
		"kvready_transfer_reports_total{result=accepted,side=receiver} 40",
		"kvready_transfer_reports_total{result=impersonated,side=receiver} 2",
		"kvready_transfer_reports_total{result=malformed,side=receiver} 1",
		"kvready_transfer_reports_total{result=refused,side=receiver} 3",
		"kvready_transfer_peers_lost_total{side=receiver} 1",
		"kvready_transfer_rejected_total{side=receiver} 4",
		"kvready_transfer_revocations_total{side=receiver} 9",
		"kvready_transfer_revocations_fenced_total{side=receiver} 8",
		"kvready_transfer_cancels_total{result=sent,side=receiver} 11",
		"kvready_transfer_cancels_total{result=unsent,side=receiver} 1",
	}
	senderLines := []string{
		"kvready_transfers_in_flight{side=sender} 4",
		"kvready_transfer_outcomes_total{outcome=cancelled,side=sender} 1",
		"kvready_transfer_outcomes_total{outcome=delivered,side=sender} 10",
		"kvready_transfer_outcomes_total{outcome=failed,side=sender} 1",
		"kvready_transfer_reports_total{result=dropped,side=sender} 2",
		"kvready_transfer_reports_total{result=held,side=sender} 3",
		"kvready_transfer_reports_total{result=taken,side=sender} 12",
		"kvready_transfer_peers_lost_total{side=sender} 1",
		"kvready_transfer_rejected_total{side=sender} 1",
		"kvready_transfer_puts_total{side=sender} 48",
		"kvready_transfer_cancels_total{result=taken,side=sender} 6",
		"kvready_transfer_cancels_total{result=ignored,side=sender} 3",
		"kvready_transfer_cancel_tombstones_total{side=sender} 2",
		"kvready_transfer_cancel_final_reports_total{side=sender} 4",
	}
	tests := []struct {
		name  string
		stats metrics.TransferStats
		want  []string
	}{
		{"a decode process: the receiver alone", metrics.TransferStats{Receiver: &recv}, receiverLines},
		{"a prefill process: the sender alone", metrics.TransferStats{Sender: &send}, senderLines},
		{"both sides in one engine", metrics.TransferStats{Receiver: &recv, Sender: &send}, append(append([]string(nil), receiverLines...), senderLines...)},
		{"neither", metrics.TransferStats{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := shown(prometheus.Labels{"device": "0"}, handmade())
			assert.Empty(t, transferSeries(t, c), "no transfers watched: no transfer series")
			c.WatchTransfers(func() metrics.TransferStats { return tt.stats })
			assert.ElementsMatch(t, tt.want, transferSeries(t, c))
			problems, err := testutil.CollectAndLint(c)
			require.NoError(t, err)
			assert.Empty(t, problems)
			c.WatchTransfers(nil)
			assert.Empty(t, transferSeries(t, c))
		})
	}
	c := shown(prometheus.Labels{"device": "0"}, handmade())
	r := recv
	c.WatchTransfers(func() metrics.TransferStats { return metrics.TransferStats{Receiver: &r} })
	r.InDoubt = 3
	v, ok := value(gather(t, c), "kvready_transfers_in_doubt", map[string]string{"side": "receiver"})
	assert.True(t, ok)
	assert.Equal(t, 3.0, v, "asked again at each scrape")
}

// TestTransferSettleHistogram: the submit-to-settled buckets, which are the
// engine's power-of-two ones, come out through the same bounds as the
// engine's latency histograms: exact cumulative counts, the sum in seconds,
// the clock label the collector's.
func TestTransferSettleHistogram(t *testing.T) {
	var recv metrics.TransferReceiverStats
	recv.Settle[12] = 3 // [2^11, 2^12) ns: under the 2^12-1 ns bound
	recv.Settle[21] = 5 // about 1–2 ms
	recv.Settle[39] = 1 // beyond the top bound: +Inf alone
	recv.SettleSum = 17 * time.Millisecond
	var send metrics.TransferSenderStats
	send.Settle[30] = 2
	send.SettleSum = 2 * time.Second
	c := shown(prometheus.Labels{"device": "0"}, handmade())
	c.SetClock(metrics.VirtualClock)
	c.WatchTransfers(func() metrics.TransferStats { return metrics.TransferStats{Receiver: &recv, Sender: &send} })
	got := map[string]string{}
	for _, m := range series(gather(t, c), "kvready_transfer_settle_latency_seconds") {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		assert.Equal(t, "virtual", labels["clock"])
		h := m.GetHistogram()
		cum := map[float64]uint64{}
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		bounds := metrics.BucketBounds()
		got[labels["side"]] = fmt.Sprintf("count %d sum %g; under %g: %d; under %g: %d; under %g: %d", h.GetSampleCount(), h.GetSampleSum(),
			bounds[1], cum[bounds[1]], bounds[6], cum[bounds[6]], bounds[len(bounds)-1], cum[bounds[len(bounds)-1]])
	}
	b := metrics.BucketBounds()
	assert.Equal(t, map[string]string{
		"receiver": fmt.Sprintf("count 9 sum 0.017; under %g: 3; under %g: 8; under %g: 8", b[1], b[6], b[len(b)-1]),
		"sender":   fmt.Sprintf("count 2 sum 2; under %g: 0; under %g: 0; under %g: 2", b[1], b[6], b[len(b)-1]),
	}, got)
}
