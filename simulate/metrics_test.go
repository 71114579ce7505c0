package simulate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvready/kvready/readiness"
)

// scrape fetches url over HTTP and parses the exposition.
func scrape(url string) (map[string]*dto.MetricFamily, []byte, error) {
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, body, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	return mfs, body, err
}

// metricValue is the value of the kvready series of family name whose labels
// include every one given (pairs).
func metricValue(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	require.True(t, ok, "the scrape has no %s", name)
	for _, m := range mf.GetMetric() {
		match := 0
		for _, lp := range m.GetLabel() {
			for i := 0; i < len(labels); i += 2 {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					match++
				}
			}
		}
		if match == len(labels)/2 {
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("%s has no series with labels %v", name, labels)
	return 0
}

// TestMetricsServedWhileTheRunGoes serves a run's metrics on a real loopback
// port, scrapes them halfway through and at the end, lints the exposition and
// checks the final values against the engine's own Stats and against the
// run's summary (the driver's own account of every lease).
func TestMetricsServedWhileTheRunGoes(t *testing.T) {
	srv, err := ServeMetrics("127.0.0.1:0")
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Close()) }()
	c := small()
	c.Metrics = srv.Collector()

	type result struct {
		mfs  map[string]*dto.MetricFamily
		body []byte
		err  error
	}
	midway := make(chan result, 1)
	started := false
	progress := func(done, total int) {
		if started || done < total/2 {
			return
		}
		// Scrape from another goroutine; return once the scrape is waiting
		// for the engine, so that the run's next round answers it.
		started = true
		go func() {
			mfs, body, err := scrape(srv.URL())
			midway <- result{mfs, body, err}
		}()
		for deadline := time.Now().Add(30 * time.Second); !srv.Collector().Due() && time.Now().Before(deadline); {
			time.Sleep(100 * time.Microsecond)
		}
	}
	sum, err := Run(context.Background(), c, progress)
	require.NoError(t, err)
	require.True(t, sum.Safe())
	require.True(t, started, "the run reported its progress halfway")

	mid := <-midway
	require.NoError(t, mid.err)
	final, body, err := scrape(srv.URL())
	require.NoError(t, err)

	// Halfway: some leases lent, fewer than by the end.
	midLent := metricValue(t, mid.mfs, "kvready_leases_lent_total", "device", "0")
	finalLent := metricValue(t, final, "kvready_leases_lent_total", "device", "0")
	assert.Positive(t, midLent)
	assert.Less(t, midLent, finalLent, "the midway scrape was served while the run went on")

	// The exposition as served passes the Prometheus linter.
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
	problems, err = promlint.New(bytes.NewReader(mid.body)).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)

	// Against the engine's own Stats, as of the round in which it drained.
	snap, ok := srv.Collector().Latest()
	require.True(t, ok)
	require.True(t, snap.Drained, "the run drained its engine")
	st := snap.Stats
	assert.Equal(t, float64(st.Lent), finalLent)
	for name, want := range map[string]uint64{
		"kvready_leases_released_total": st.Released, "kvready_leases_quarantined_total": st.QuarantinedLeases,
		"kvready_quiesce_calls_total": st.QuiesceCalls, "kvready_quiesce_retries_total": st.QuiesceRetries,
		"kvready_containments_total": st.Containments, "kvready_ungrantable_leases_total": st.Ungrantable,
		"kvready_stale_evidence_total": st.StaleEvidence,
	} {
		assert.Equal(t, float64(want), metricValue(t, final, name, "device", "0"), name)
	}
	for s := range readiness.NumStates {
		assert.Equal(t, float64(st.Leases[s]), metricValue(t, final, "kvready_leases", "state", readiness.State(s).String()), "leases %v", readiness.State(s))
	}
	var quarantined float64
	for g := range c.Groups {
		quarantined += metricValue(t, final, "kvready_slots", "group", fmt.Sprint(g), "state", "quarantined")
	}
	assert.Equal(t, float64(st.SlotsQuarantined), quarantined)
	require.Contains(t, final, "kvready_readiness_latency_seconds")
	assert.Equal(t, st.ReadyLatency.Total, final["kvready_readiness_latency_seconds"].GetMetric()[0].GetHistogram().GetSampleCount())
	// The run is on the virtual clock (the in-process store): the series
	// measured on the engine's clock say so, and their HELP says what it means.
	for _, name := range []string{"kvready_readiness_latency_seconds", "kvready_fence_latency_seconds", "kvready_oldest_unfenced_age_seconds"} {
		require.Contains(t, final, name)
		clock := ""
		for _, lp := range final[name].GetMetric()[0].GetLabel() {
			if lp.GetName() == "clock" {
				clock = lp.GetValue()
			}
		}
		assert.Equal(t, "virtual", clock, name)
		assert.Contains(t, final[name].GetHelp(), "virtual a simulated clock", name)
	}

	// Against the summary: the driver's own account, kept apart from the engine.
	outcome := func(kind string) float64 {
		return metricValue(t, final, "kvready_outcomes_total", "outcome", kind)
	}
	assert.Equal(t, float64(sum.Served), outcome("served"))
	assert.Equal(t, float64(sum.Partial), outcome("partial"))
	assert.Equal(t, float64(sum.Missed), outcome("missed"))
	assert.Equal(t, float64(sum.Timeouts), outcome("timeout"))
	assert.Equal(t, float64(sum.Cancelled), outcome("cancelled"))
	assert.Equal(t, float64(sum.Rejected), outcome("rejected"))
	assert.Equal(t, float64(sum.Violations), outcome("violation"))
	assert.Equal(t, float64(sum.Failed-sum.Timeouts-sum.Cancelled-sum.Rejected-sum.Violations), outcome("failed"),
		"the summary's failures include the timeouts, cancellations, rejections and violations")
	assert.Equal(t, float64(sum.Containments), metricValue(t, final, "kvready_containments_total"))
	assert.Equal(t, float64(sum.SlotsQuarantined), quarantined)
	assert.Equal(t, float64(sum.Released), metricValue(t, final, "kvready_leases_released_total"))
	assert.Equal(t, float64(sum.Leases), finalLent-metricValue(t, final, "kvready_ungrantable_leases_total"),
		"every lease lent is in the summary but those quarantine made ungrantable, which the driver refuses")
	for _, k := range []readiness.OutcomeKind{readiness.Served, readiness.Partial, readiness.Missed, readiness.Failed,
		readiness.Cancelled, readiness.Rejected, readiness.TimedOut} {
		assert.NotZero(t, st.Outcomes[k], "the workload latches a %v outcome", k)
	}
}

func TestMetricsRefusedForTheNaiveManager(t *testing.T) {
	srv, err := ServeMetrics("127.0.0.1:0")
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.Close()) }()
	c := small()
	c.Naive, c.Metrics = true, srv.Collector()
	err = c.Validate()
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "metrics-addr", fe.Field)
}

func TestServeMetricsRefusesABadAddress(t *testing.T) {
	_, err := ServeMetrics("127.0.0.1:not-a-port")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not-a-port")
}
