package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Open connects to the store named by rawURL, checks that it answers, and
// returns a backend that owns the client (Close closes it).
//
//	redis://[user:password@]host:port[/db]       one server (Redis, Valkey)
//	rediss://...                                  the same over TLS
//	unix:///path/to/redis.sock[?db=N]             one server on a Unix socket
//	redis://host:port?addr=host2:port2&addr=...   a Cluster, seeded with these nodes
//	redis://host:port?cluster=true                a Cluster, seeded with one node
//	redis://sentinel:port?master_name=NAME[&addr=sentinel2:port]  Sentinel
//
// A plain redis:// or rediss:// URL that turns out to name a Cluster node
// (INFO cluster says cluster_enabled:1) is opened as a Cluster, so pointing at
// any node of a Cluster works. These query parameters set the breaker, over
// the options given (a URL is all a C or Python embedder passes):
//
//	breaker_failures=N      WithBreaker(N): failed calls in a row that hold the store for down (0: never)
//	breaker_probe=D         WithBreakerProbe: the first wait between PINGs (e.g. 100ms)
//	breaker_probe_max=D     WithBreakerProbe: the longest wait between PINGs (e.g. 2s)
//
// Other query parameters are go-redis options
// (read_timeout=2s, pool_size=20, ...; see goredis.ParseURL); an unknown one is
// an error.
//
// The client is built to keep every attempt inside its bound (see
// WithAttemptTimeout and docs/backend-redis.md): it honours context deadlines
// (ContextTimeoutEnabled), so each network call ends at its attempt's
// deadline; its dial, pool-wait and retry-backoff times are at most the bound
// (a dial that go-redis runs in the background then ends with the attempt
// that wanted it); a failed dial is not retried and a failed call is retried
// once (a pooled connection the server closed), unless the URL says
// otherwise; and its pools hold a connection per worker. A URL that turns
// socket deadlines off (a negative read_timeout or write_timeout) is refused.
//
// ctx bounds the connection check. Errors name the URL with its password
// redacted. A URL or an option that is wrong — a value out of range or of
// the wrong form, a query key given twice (addr aside), an unknown one —
// wraps ErrConfig: opening again changes nothing, the configuration must
// change (CheckURL finds these without connecting). A store that does not
// answer wraps ErrUnavailable: it may answer later.
func Open(ctx context.Context, rawURL string, mem Memory, opts ...Option) (*Backend, error) {
	if ctx == nil {
		return nil, configErr(errors.New("redis: Open: ctx is nil"))
	}
	t, err := parseTarget(rawURL, opts)
	if err != nil {
		return nil, err
	}
	client := t.client()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, unavailableErr(fmt.Errorf("redis: Open %s: the store does not answer PING: %w", t.shown, err))
	}
	// single: INFO cluster answered cluster_enabled:0 — one Redis server (or
	// one that passes for it), not a Cluster, and not a proxy that knows no
	// INFO (twemproxy, Envoy's), which would not know MSETNX either.
	single := false
	if _, isCluster := client.(*goredis.ClusterClient); !isCluster && !t.sentinel {
		info, err := client.Info(ctx, "cluster").Result()
		single = err == nil && strings.Contains(info, "cluster_enabled:0")
		if err == nil && strings.Contains(info, "cluster_enabled:1") && t.u.Scheme != "unix" {
			_ = client.Close()
			o, err := clusterOptions(t.u, t.s)
			if err != nil {
				return nil, configErr(fmt.Errorf("redis: Open %s: the server is a Cluster node: %w", t.shown, err))
			}
			client = goredis.NewClusterClient(o)
			if err := client.Ping(ctx).Err(); err != nil {
				_ = client.Close()
				return nil, unavailableErr(fmt.Errorf("redis: Open %s: the Cluster does not answer PING: %w", t.shown, err))
			}
		}
	}
	b, err := newBackend(client, mem, t.s)
	if err != nil {
		_ = client.Close()
		return nil, configErr(err)
	}
	b.owned = true
	if _, isCluster := client.(*goredis.ClusterClient); !isCluster && t.publish != nil {
		b.pub = goredis.NewClient(t.publish) // connects lazily, on the first publication
		b.whole = single
	}
	return b, nil
}

// ErrConfig is wrapped by the errors of Open and CheckURL that say the URL
// or an option is wrong: nothing was opened, and trying again changes
// nothing until the configuration does.
var ErrConfig = errors.New("redis: bad configuration")

// CheckURL reports what Open would refuse in rawURL and opts without
// connecting to anything: a scheme, a query value or an option that is
// wrong, a query key given twice, an unknown query key. Its errors wrap
// ErrConfig, and are Open's. A nil error does not say the store answers.
func CheckURL(rawURL string, opts ...Option) error {
	_, err := parseTarget(rawURL, opts)
	return err
}

// tagged is err, found by errors.Is as tag too, with err's message.
type tagged struct{ err, tag error }

func (e tagged) Error() string   { return e.err.Error() }
func (e tagged) Unwrap() []error { return []error{e.err, e.tag} }

func configErr(err error) error      { return tagged{err, ErrConfig} }
func unavailableErr(err error) error { return tagged{err, ErrUnavailable} }

// target is a parsed URL: what Open connects to, and how.
type target struct {
	u        *url.URL
	shown    string // the URL, password redacted
	s        settings
	sentinel bool
	single   *goredis.Options
	publish  *goredis.Options // single's, for publications (gather.go); nil: none
	cluster  *goredis.ClusterOptions
	failover *goredis.FailoverOptions
}

// client builds the client the target names (go-redis connects lazily).
func (t *target) client() goredis.UniversalClient {
	switch {
	case t.failover != nil:
		return goredis.NewFailoverClient(t.failover)
	case t.cluster != nil:
		return goredis.NewClusterClient(t.cluster)
	}
	return goredis.NewClient(t.single)
}

// parseTarget checks rawURL and opts and builds the client's options; every
// error wraps ErrConfig.
func parseTarget(rawURL string, opts []Option) (*target, error) {
	s, err := apply("Open", opts)
	if err != nil {
		return nil, configErr(err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the message would repeat the URL, password included
		}
		return nil, configErr(fmt.Errorf("redis: Open: not a URL: %w; want redis://host:port[/db]", err))
	}
	t := &target{u: u, shown: u.Redacted()}
	fail := func(err error) (*target, error) {
		return nil, configErr(fmt.Errorf("redis: Open %s: %w", t.shown, err))
	}
	switch u.Scheme {
	case "redis", "rediss", "unix":
	default:
		return fail(fmt.Errorf("scheme %q; want redis://, rediss:// or unix://", u.Scheme))
	}
	q := u.Query()
	if err := repeatedKeys(q); err != nil {
		return fail(err)
	}
	cluster := false
	if v := q.Get("cluster"); v != "" {
		if cluster, err = strconv.ParseBool(v); err != nil {
			return fail(fmt.Errorf("cluster=%q; want true or false", v))
		}
	}
	q.Del("cluster")
	if err := breakerParams(q, &s); err != nil {
		return fail(err)
	}
	u.RawQuery = q.Encode()
	t.sentinel = q.Has("master_name")
	if u.Scheme == "unix" && (cluster || t.sentinel || q.Has("addr")) {
		return fail(errors.New("a unix:// URL names one server; Cluster and Sentinel need redis:// or rediss://"))
	}
	switch {
	case t.sentinel:
		t.failover, err = failoverOptions(u, s)
	case cluster || q.Has("addr"):
		t.cluster, err = clusterOptions(u, s)
	default:
		t.single, err = singleOptions(u, s)
		if err == nil {
			t.publish = publishOptions(t.single)
		}
	}
	if err != nil {
		return fail(err)
	}
	t.s = s
	return t, nil
}

// repeatedKeys refuses a query key given more than once, but addr (one per
// seed node): go-redis would take one of the values and drop the others
// without a word.
func repeatedKeys(q url.Values) error {
	var errs []error
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if vs := q[k]; len(vs) > 1 && k != "addr" {
			errs = append(errs, fmt.Errorf("%s given %d times (%q); want each query key once (only addr repeats, one per seed node)", k, len(vs), vs))
		}
	}
	return errors.Join(errs...)
}

func singleOptions(u *url.URL, s settings) (*goredis.Options, error) {
	o, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, err
	}
	if err := bound(s, knobsOf(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
		&o.MaxRetryBackoff, &o.DialerRetryTimeout, &o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.PipelinePoolSize, false)); err != nil {
		return nil, err
	}
	o.Dialer = softDialer(o.Dialer, &o.DialTimeout, o.TLSConfig)
	return o, nil
}

func clusterOptions(u *url.URL, s settings) (*goredis.ClusterOptions, error) {
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return nil, fmt.Errorf("database %q: a Cluster has database 0 only", db)
	}
	c := *u
	c.Path = ""
	o, err := goredis.ParseClusterURL(c.String())
	if err != nil {
		return nil, err
	}
	// The Cluster retries through redirects (MaxRedirects) and, by default,
	// not per node: MaxRetries is left as go-redis sets it.
	if err := bound(s, knobsOf(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
		&o.MaxRetryBackoff, &o.DialerRetryTimeout, &o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.PipelinePoolSize, true)); err != nil {
		return nil, err
	}
	o.Dialer = softDialer(o.Dialer, &o.DialTimeout, o.TLSConfig)
	return o, nil
}

func failoverOptions(u *url.URL, s settings) (*goredis.FailoverOptions, error) {
	o, err := goredis.ParseFailoverURL(u.String())
	if err != nil {
		return nil, err
	}
	if err := bound(s, knobsOf(&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
		&o.MaxRetryBackoff, &o.DialerRetryTimeout, &o.MaxRetries, &o.DialerRetries, &o.PoolSize, &o.PipelinePoolSize, false)); err != nil {
		return nil, err
	}
	o.Dialer = softDialer(o.Dialer, &o.DialTimeout, o.TLSConfig)
	return o, nil
}

// knobs are the go-redis options the attempt bound governs, shared by the
// single-server, Cluster and failover options.
type knobs struct {
	ctxTimeout                                  *bool
	dial, read, write, pool, backoff, dialRetry *time.Duration
	retries, dialRetries, poolSize, pipeSize    *int
	cluster                                     bool
}

func knobsOf(ctxTimeout *bool, dial, read, write, pool, backoff, dialRetry *time.Duration,
	retries, dialRetries, poolSize, pipeSize *int, cluster bool) knobs {
	return knobs{ctxTimeout, dial, read, write, pool, backoff, dialRetry, retries, dialRetries, poolSize, pipeSize, cluster}
}

// bound configures a client's options, as parsed from the URL (zero where the
// URL said nothing), so that nothing an attempt starts outlives its bound.
func bound(s settings, k knobs) error {
	for _, t := range []struct {
		name string
		v    time.Duration
	}{{"read_timeout", *k.read}, {"write_timeout", *k.write}} {
		// go-redis sets no socket deadline for a negative timeout (but -1,
		// which means "no timeout": the context's deadline still applies).
		if t.v < 0 && t.v != -1 {
			return fmt.Errorf("%s=%v turns socket deadlines off, so a call could outlive its attempt; want a positive duration, or none (the attempt's deadline bounds every call)", t.name, t.v)
		}
	}
	limit := s.timeout
	capped := func(d *time.Duration, unset time.Duration) { // 0: not given; negative: off, as go-redis reads it
		if *d == 0 {
			*d = unset
		}
		*d = min(*d, limit)
	}
	// Each network call carries its attempt's deadline.
	*k.ctxTimeout = true
	// A dial runs in a go-redis goroutine of its own, which the attempt
	// that wanted the connection does not wait for: bounding each try and
	// not retrying keeps it inside the bound as well.
	if *k.dial <= 0 { // no dial timeout at all: a background dial could run for ever
		*k.dial = 5 * time.Second
	}
	capped(k.dial, 5*time.Second)
	if *k.dialRetries == 0 {
		*k.dialRetries = 1
	}
	capped(k.dialRetry, 100*time.Millisecond)
	// Waiting for a connection, and backing off between retries, honour the
	// attempt's deadline already; these caps keep calls without one (Put,
	// Get) from waiting longer than an attempt would.
	capped(k.pool, limit)
	capped(k.backoff, min(512*time.Millisecond, max(limit/4, time.Millisecond)))
	if *k.retries == 0 && !k.cluster {
		*k.retries = 1 // a pooled connection the server closed: retry once on a new one
	}
	// A connection per worker, in both pools, so that a call never waits
	// for one (AdmissionLimit counts on it).
	if *k.poolSize == 0 {
		*k.poolSize = 10 * runtime.GOMAXPROCS(0)
	}
	*k.poolSize = max(*k.poolSize, s.workers)
	if *k.pipeSize >= 0 {
		*k.pipeSize = max(*k.pipeSize, goredis.DefaultPipelinePoolSize, s.workers)
	}
	return nil
}

// softDialer wraps a client's dialer (nil: go-redis's own, a net.Dialer
// bounded by the dial timeout and ctx, with TLS when configured) so that a
// failed dial reaches go-redis as a connection whose every read and write
// fails with the dial's error: the call that wanted it fails with that error,
// and the connection is dropped.
//
// Why: go-redis counts failed dials, and after as many as the pool has
// connections it stops dialling and starts a goroutine that probes the server
// once a second, sleeping between probes, until one succeeds. That goroutine
// outlives Close by up to a second, so a backend whose store was down would
// leave work running after it was closed, and the calls made meanwhile would
// fail with a stale error instead of trying the (perhaps restarted) server.
// With this, every call dials afresh, within its attempt's bound.
func softDialer(dial func(context.Context, string, string) (net.Conn, error), timeout *time.Duration, tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	if dial == nil {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := &net.Dialer{Timeout: *timeout}
			if tlsConfig == nil {
				return d.DialContext(ctx, network, addr)
			}
			td := &tls.Dialer{NetDialer: d, Config: tlsConfig}
			return td.DialContext(ctx, network, addr)
		}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return failedConn{err}, nil
		}
		return c, nil
	}
}

// failedConn is a dial that failed, as a connection: every read and write
// fails with the dial's error.
type failedConn struct{ err error }

func (c failedConn) Read([]byte) (int, error)       { return 0, c.err }
func (c failedConn) Write([]byte) (int, error)      { return 0, c.err }
func (failedConn) Close() error                     { return nil }
func (failedConn) LocalAddr() net.Addr              { return failedAddr{} }
func (failedConn) RemoteAddr() net.Addr             { return failedAddr{} }
func (failedConn) SetDeadline(time.Time) error      { return nil }
func (failedConn) SetReadDeadline(time.Time) error  { return nil }
func (failedConn) SetWriteDeadline(time.Time) error { return nil }

type failedAddr struct{}

func (failedAddr) Network() string { return "failed" }
func (failedAddr) String() string  { return "failed-dial" }

// breakerParams applies the breaker's query parameters to s and removes
// them from q, so that go-redis sees only its own.
func breakerParams(q url.Values, s *settings) error {
	if v := q.Get("breaker_failures"); q.Has("breaker_failures") {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("breaker_failures=%q; want a number of calls, 0 to turn the breaker off", v)
		}
		if err := WithBreaker(n)(s); err != nil {
			return fmt.Errorf("breaker_failures=%q: %w", v, err)
		}
	}
	// The two probe bounds are checked together, whichever the URL gives:
	// the other is the option's (or the default), and the error says so.
	first, most := s.probeFirst, s.probeMax
	for _, p := range []struct {
		key string
		d   *time.Duration
	}{{"breaker_probe", &first}, {"breaker_probe_max", &most}} {
		if !q.Has(p.key) {
			continue
		}
		v := q.Get(p.key)
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s=%q; want a duration such as 100ms or 2s", p.key, v)
		}
		*p.d = d
	}
	hasFirst, hasMost := q.Has("breaker_probe"), q.Has("breaker_probe_max")
	if hasFirst && !hasMost {
		most = max(most, first) // a first wait alone raises the longest to it
	}
	if first < time.Millisecond || most < first || most > time.Hour {
		given := func(key string, d time.Duration, in bool) string {
			if in {
				return fmt.Sprintf("%s=%v", key, d)
			}
			return fmt.Sprintf("%s %v (not in the URL: the option's or the default)", key, d)
		}
		return fmt.Errorf("%s, %s; want 1ms <= breaker_probe <= breaker_probe_max <= 1h",
			given("breaker_probe", first, hasFirst), given("breaker_probe_max", most, hasMost))
	}
	s.probeFirst, s.probeMax = first, most
	for _, k := range []string{"breaker_failures", "breaker_probe", "breaker_probe_max"} {
		q.Del(k)
	}
	return nil
}
