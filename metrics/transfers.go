package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvready/kvready/readiness"
)

// TransferReceiverStats is what the decode side of peer transfers (a
// backend/peer Receiver, the engine's fetcher) counted. Its fields are
// backend/peer ReceiverStats's, in the same order and of the same types, so
// that one converts into the other (metrics.TransferReceiverStats(s)) and a
// field added there fails to compile at the conversion until it is added
// here, and exported: the metrics package stays an adapter that imports no
// backend.
type TransferReceiverStats struct {
	Evidence     uint64
	Refused      uint64
	Malformed    uint64
	Impersonated uint64
	PeersLost    uint64
	Rejected     uint64
	Revocations  uint64
	Fenced       uint64
	Cancels      uint64
	Unsent       uint64

	InFlight, InDoubt            uint64
	Delivered, Failed, Cancelled uint64
	Settle                       [40]uint64
	SettleSum                    time.Duration
}

// TransferSenderStats is what the prefill side of peer transfers (a
// backend/peer Sender, the engine's publisher) counted; it mirrors
// backend/peer SenderStats as TransferReceiverStats mirrors ReceiverStats.
type TransferSenderStats struct {
	Offers    uint64
	Held      uint64
	Dropped   uint64
	Puts      uint64
	PeersLost uint64
	Rejected  uint64

	Cancels, Tombstones, Ignored uint64
	Finals                       uint64

	InFlight                     uint64
	Delivered, Failed, Cancelled uint64
	Settle                       [40]uint64
	SettleSum                    time.Duration
}

// TransferStats is the peer transfers of one engine's backends: its
// receiver and its sender, each nil when the engine has none on that side.
type TransferStats struct {
	Receiver *TransferReceiverStats
	Sender   *TransferSenderStats
}

// WatchTransfers has the collector export stats, asked at each scrape, as
// the kvready_transfer* families, labelled side="receiver" or
// side="sender": peer transfers behind the engine (backend/peer:
// func() metrics.TransferStats { r := metrics.TransferReceiverStats(recv.Stats()); return metrics.TransferStats{Receiver: &r} }).
// No peer is named in a label: peers come and go with their incarnations,
// and a label per peer would grow without bound. The submit-to-settled
// histogram carries the collector's clock label (SetClock): give the
// backend the engine's Clock. Without a source those families are not
// sent; nil stops them. Safe from any goroutine.
func (c *Collector) WatchTransfers(stats func() TransferStats) {
	if stats == nil {
		c.transfers.Store(nil)
		return
	}
	c.transfers.Store(&stats)
}

// collectTransfers sends the watched transfers' series, if any.
func (c *Collector) collectTransfers(ch chan<- prometheus.Metric) {
	f := c.transfers.Load()
	if f == nil {
		return
	}
	c.mu.Lock()
	clock := c.clock.String()
	c.mu.Unlock()
	st := (*f)()
	if r := st.Receiver; r != nil {
		send := c.transferSender(ch, "receiver")
		send(transfersInFlight, prometheus.GaugeValue, r.InFlight)
		send(transfersInDoubt, prometheus.GaugeValue, r.InDoubt)
		c.transferCommon(send, r.Delivered, r.Failed, r.Cancelled, r.PeersLost, r.Rejected)
		for _, x := range []struct {
			result string
			v      uint64
		}{{"accepted", r.Evidence}, {"refused", r.Refused}, {"malformed", r.Malformed}, {"impersonated", r.Impersonated}} {
			send(transferReports, prometheus.CounterValue, x.v, x.result)
		}
		send(transferRevocations, prometheus.CounterValue, r.Revocations)
		send(transferRevocationsFenced, prometheus.CounterValue, r.Fenced)
		send(transferCancels, prometheus.CounterValue, r.Cancels, "sent")
		send(transferCancels, prometheus.CounterValue, r.Unsent, "unsent")
		ch <- c.settleHistogram(&r.Settle, r.SettleSum, "receiver", clock)
	}
	if s := st.Sender; s != nil {
		send := c.transferSender(ch, "sender")
		send(transfersInFlight, prometheus.GaugeValue, s.InFlight)
		c.transferCommon(send, s.Delivered, s.Failed, s.Cancelled, s.PeersLost, s.Rejected)
		for _, x := range []struct {
			result string
			v      uint64
		}{{"taken", s.Offers}, {"held", s.Held}, {"dropped", s.Dropped}} {
			send(transferReports, prometheus.CounterValue, x.v, x.result)
		}
		send(transferPuts, prometheus.CounterValue, s.Puts)
		send(transferCancels, prometheus.CounterValue, s.Cancels, "taken")
		send(transferCancels, prometheus.CounterValue, s.Ignored, "ignored")
		send(transferCancelTombstones, prometheus.CounterValue, s.Tombstones)
		send(transferCancelFinals, prometheus.CounterValue, s.Finals)
		ch <- c.settleHistogram(&s.Settle, s.SettleSum, "sender", clock)
	}
}

type sendFunc func(f family, t prometheus.ValueType, v uint64, labels ...string)

// transferSender returns a function that sends one series of side.
func (c *Collector) transferSender(ch chan<- prometheus.Metric, side string) sendFunc {
	return func(f family, t prometheus.ValueType, v uint64, labels ...string) {
		m, err := prometheus.NewConstMetric(c.desc[f], t, float64(v), append([]string{side}, labels...)...)
		if err != nil {
			m = prometheus.NewInvalidMetric(c.desc[f], err)
		}
		ch <- m
	}
}

// transferCommon sends what both sides count alike.
func (c *Collector) transferCommon(send sendFunc, delivered, failed, cancelled, lost, rejected uint64) {
	send(transferOutcomes, prometheus.CounterValue, delivered, "delivered")
	send(transferOutcomes, prometheus.CounterValue, failed, "failed")
	send(transferOutcomes, prometheus.CounterValue, cancelled, "cancelled")
	send(transferPeersLost, prometheus.CounterValue, lost)
	send(transferRejected, prometheus.CounterValue, rejected)
}

// settleHistogram exports a side's submit-to-settled buckets, which are the
// engine's (bucket i holds [2^(i-1), 2^i) ns), through the same bounds.
func (c *Collector) settleHistogram(counts *[40]uint64, sum time.Duration, side, clock string) prometheus.Metric {
	h := readiness.Histogram{Counts: *counts, Sum: uint64(max(sum, 0))}
	for _, n := range counts {
		h.Total += n
	}
	return c.histogram(transferSettleLatency, &h, side, clock)
}
