package ucxfigure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// perftestMB is the byte count of ucx_perftest's "MB": it divides by
// 1024·1024 (a 2 MiB put every 999.79 µs prints 2000.42 MB/s), where Go's
// benchmarks count 10⁶.
const perftestMB = 1 << 20

// csvHeader is the header ucx_perftest -f -v prints before its final row.
var csvHeader = []string{"iterations", "50.0_percentile_lat", "avg_lat", "overall_lat", "avg_bw", "overall_bw", "avg_mr", "overall_mr"}

// Perftest is one ucx_perftest client's final row.
type Perftest struct {
	Iterations int64
	// BytesPerSec is the overall bandwidth, in bytes per second (converted
	// from ucx_perftest's MiB/s).
	BytesPerSec float64
}

// ParsePerftest reads the output of `ucx_perftest ... -f -v` (the final
// numbers, as CSV): exactly one header line naming the columns above,
// followed by exactly one row of as many fields, a positive iteration count
// and a positive, finite overall bandwidth. Lines before the header (UCX's
// own warnings) are ignored; anything else is an error that names the line.
func ParsePerftest(out []byte) (Perftest, error) {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	at := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == strings.Join(csvHeader, ",") {
			if at >= 0 {
				return Perftest{}, fmt.Errorf("ucx_perftest output has two CSV headers (lines %d and %d); one expected", at+1, i+1)
			}
			at = i
		}
	}
	if at < 0 {
		return Perftest{}, fmt.Errorf("ucx_perftest output has no CSV header %q: run it with -f -v", strings.Join(csvHeader, ","))
	}
	if len(lines) != at+2 {
		return Perftest{}, fmt.Errorf("ucx_perftest output has %d lines after its CSV header; exactly one row expected", len(lines)-at-1)
	}
	row := strings.Split(strings.TrimSpace(lines[at+1]), ",")
	if len(row) != len(csvHeader) {
		return Perftest{}, fmt.Errorf("ucx_perftest row %q has %d fields; %d expected", lines[at+1], len(row), len(csvHeader))
	}
	iters, err := strconv.ParseInt(row[0], 10, 64)
	if err != nil || iters <= 0 {
		return Perftest{}, fmt.Errorf("ucx_perftest iterations %q: a positive integer expected", row[0])
	}
	bw, err := strconv.ParseFloat(row[5], 64)
	if err != nil || math.IsNaN(bw) || math.IsInf(bw*perftestMB, 0) || bw <= 0 {
		return Perftest{}, fmt.Errorf("ucx_perftest overall_bw %q: a positive finite number of MB/s expected", row[5])
	}
	for i, f := range row[1:] {
		if _, err := strconv.ParseFloat(f, 64); err != nil {
			return Perftest{}, fmt.Errorf("ucx_perftest %s %q: a number expected", csvHeader[i+1], f)
		}
	}
	return Perftest{Iterations: iters, BytesPerSec: bw * perftestMB}, nil
}

// The ucx_perftest tests a PerftestConfig may name. ucp_put_bw is SPEC §5's
// anchor, a one-sided put; ucp_am_bw is an active message, what a Checked
// put is (its bytes travel with the message and its receiver's handler
// sees them arrive), in view beside it over shared memory.
const (
	PutBW = "ucp_put_bw"
	AMBW  = "ucp_am_bw"
)

// PerftestConfig is one ucx_perftest measurement: a bandwidth test between
// a server and a client process on this machine.
type PerftestConfig struct {
	Binary     string // default "ucx_perftest", found on PATH
	Test       string // PutBW (the default) or AMBW
	Transports string // UCX_TLS of both processes, e.g. "tcp" or "sm"
	Size       int    // bytes a put
	Iterations int    // puts measured
	Warmup     int    // puts before (ucx_perftest's -w)
	// Env is added to both processes' environment (e.g. UCX_ALLOC_PRIO).
	Env []string
}

// errPortTaken: the server could not listen on the port drawn; another is
// drawn.
var errPortTaken = errors.New("ucx_perftest server exited before the client connected")

// RunPerftest runs one measurement and answers the client's final row. It
// draws a free loopback port for the server (ucx_perftest exchanges
// addresses over TCP), retries with another when the server could not take
// it, and retries the client while the server is not yet listening. Every
// wait is bounded by ctx; both processes are killed and reaped on return.
func RunPerftest(ctx context.Context, cfg PerftestConfig) (Perftest, error) {
	if cfg.Binary == "" {
		cfg.Binary = "ucx_perftest"
	}
	if _, err := exec.LookPath(cfg.Binary); err != nil {
		return Perftest{}, fmt.Errorf("%s not found (%w): install Debian's ucx-utils (`apt-get install ucx-utils`, as `make deps` does)", cfg.Binary, err)
	}
	if err := cfg.check(); err != nil {
		return Perftest{}, err
	}
	var err error
	for range 5 {
		var p Perftest
		p, err = runOnce(ctx, cfg)
		if !errors.Is(err, errPortTaken) {
			return p, err
		}
	}
	return Perftest{}, fmt.Errorf("5 ports drawn: %w", err)
}

func runOnce(ctx context.Context, cfg PerftestConfig) (Perftest, error) {
	port, err := freePort()
	if err != nil {
		return Perftest{}, err
	}
	env := append(append(os.Environ(), "UCX_TLS="+cfg.Transports), cfg.Env...)
	srv := exec.CommandContext(ctx, cfg.Binary, "-p", strconv.Itoa(port))
	srv.Env = env
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return Perftest{}, fmt.Errorf("starting the ucx_perftest server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = srv.Wait(); close(exited) }()
	defer func() {
		_ = srv.Process.Kill()
		<-exited
	}()
	args := cfg.clientArgs(port)
	for {
		cli := exec.CommandContext(ctx, cfg.Binary, args...)
		cli.Env = env
		out, cerr := cli.CombinedOutput()
		if cerr == nil {
			return ParsePerftest(out)
		}
		refused := bytes.Contains(out, []byte("Connection refused"))
		select {
		case <-exited:
			return Perftest{}, fmt.Errorf("%w (port %d): %s", errPortTaken, port, srvOut.String())
		default:
		}
		if !refused {
			return Perftest{}, fmt.Errorf("ucx_perftest client (%s, UCX_TLS=%s, %d B): %v: %s", cfg.test(), cfg.Transports, cfg.Size, cerr, out)
		}
		select {
		case <-ctx.Done():
			return Perftest{}, fmt.Errorf("ucx_perftest server on port %d not listening before the bound: %w", port, ctx.Err())
		case <-time.After(20 * time.Millisecond): // the server is still starting
		}
	}
}

func (cfg PerftestConfig) test() string {
	if cfg.Test == "" {
		return PutBW
	}
	return cfg.Test
}

// check refuses a config ucx_perftest would run as something else: an
// unknown test, or sizes and counts it would take for its own defaults.
func (cfg PerftestConfig) check() error {
	if t := cfg.test(); t != PutBW && t != AMBW {
		return fmt.Errorf("ucx_perftest test %q: %s or %s expected", t, PutBW, AMBW)
	}
	if cfg.Size <= 0 || cfg.Iterations <= 0 || cfg.Warmup < 0 || cfg.Transports == "" {
		return fmt.Errorf("ucx_perftest config %+v: a size and iterations > 0, warmup ≥ 0 and transports expected", cfg)
	}
	return nil
}

// clientArgs is the client's command line. Both tests take the same flags
// in 1.13 (one contiguous message of -s bytes in host memory, the server
// learning the test from the client) and print the same final CSV row.
func (cfg PerftestConfig) clientArgs(port int) []string {
	return []string{"127.0.0.1", "-p", strconv.Itoa(port), "-t", cfg.test(), "-s", strconv.Itoa(cfg.Size),
		"-n", strconv.Itoa(cfg.Iterations), "-w", strconv.Itoa(cfg.Warmup), "-f", "-v"}
}

// freePort answers a loopback port nothing listened on a moment ago; the
// caller retries when another process takes it meanwhile.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("drawing a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
