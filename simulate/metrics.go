package simulate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvready/kvready/metrics"
)

// MetricsDevice is the device label of the run's engine series: the
// simulated GPU is device 0.
const MetricsDevice = "0"

// MetricsServer serves Prometheus metrics over HTTP, on /metrics, while runs
// go on: the run's engine counters (set Config.Metrics to Collector()) and
// the Go runtime's and the process's own.
type MetricsServer struct {
	c    *metrics.Collector
	reg  *prometheus.Registry
	ln   net.Listener
	srv  *http.Server
	done chan error
}

// ServeMetrics listens on addr (HOST:PORT; port 0 picks a free one) and
// serves /metrics until Close. It fails if it cannot listen there.
func ServeMetrics(addr string) (*MetricsServer, error) {
	m := &MetricsServer{
		c:    metrics.New(prometheus.Labels{"device": MetricsDevice}),
		reg:  prometheus.NewRegistry(),
		done: make(chan error, 1),
	}
	m.reg.MustRegister(m.c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("simulate: listening for metrics scrapes: %w", err)
	}
	m.ln = ln
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { m.done <- m.srv.Serve(ln) }()
	return m, nil
}

// Collector is the run's engine collector: set it as Config.Metrics. It
// serves one run.
func (m *MetricsServer) Collector() *metrics.Collector { return m.c }

// URL is where the metrics are served, e.g. http://127.0.0.1:9464/metrics.
func (m *MetricsServer) URL() string { return "http://" + m.ln.Addr().String() + "/metrics" }

// Close stops serving: it waits, a few seconds at most, for the scrapes in
// progress to end.
func (m *MetricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if serr := <-m.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
