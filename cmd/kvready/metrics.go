package main

import "github.com/kvready/kvready/simulate"

// serveMetrics starts serving the run's engine metrics on addr and sets
// cfg.Metrics (Config.Validate then refuses a run without an engine); stop
// ends serving once the run is over. It reports false, having said why, if it
// cannot listen there.
func serveMetrics(e *env, cfg *simulate.Config, addr string) (url string, stop func(), ok bool) {
	srv, err := simulate.ServeMetrics(addr)
	if err != nil {
		e.errorf("-metrics-addr: %v; want a free HOST:PORT to listen on, e.g. 127.0.0.1:9464", err)
		return "", nil, false
	}
	cfg.Metrics = srv.Collector()
	return srv.URL(), func() {
		if err := srv.Close(); err != nil {
			e.errorf("stopping the metrics server: %v", err)
		}
	}, true
}
