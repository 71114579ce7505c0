package simulate

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// TierSpec is one tier of a stack of tiers (Config.Backend holding a
// comma-separated list of stores), as ParseTiers reads it.
type TierSpec struct {
	// Name names the tier in the summary, the report and the metrics' tier
	// label: its kind, "mem" or "redis", with its position in the stack
	// appended when two tiers are of one kind ("mem0", "mem1").
	Name string
	// URL is a Redis store's URL, as given; "" for an in-process tier.
	URL string
	// CapacityBytes bounds an in-process tier's rows in bytes (backend/mem
	// WithCapacityBytes: the least recently used rows are evicted); 0 is
	// unbounded.
	CapacityBytes int64
}

// String writes the tier as ParseTiers reads it: mem, mem?capacity=BYTES (in
// KiB, MiB or GiB when it is a whole number of them) or the Redis URL.
func (t TierSpec) String() string {
	switch {
	case t.URL != "":
		return t.URL
	case t.CapacityBytes > 0:
		n, unit := t.CapacityBytes, ""
		for _, u := range byteUnits[:3] { // KiB, MiB, GiB: the largest that divides it
			if t.CapacityBytes%u.n == 0 {
				n, unit = t.CapacityBytes/u.n, u.suffix
			}
		}
		return "mem?capacity=" + strconv.FormatInt(n, 10) + unit
	default:
		return MemBackend
	}
}

// MaxTiers bounds the tiers of a stack: each is a backend with its own
// goroutines, and a deeper stack only adds hops to a miss.
const MaxTiers = 4

// maxTierBytes bounds an in-process tier's capacity (1 TiB), far above any
// run's rows, so that the sum of its rows' sizes never overflows.
const maxTierBytes = int64(1) << 40

// tierWant is what a tier may be, said in every refusal.
const tierWant = "want mem or mem?capacity=BYTES (an in-process tier, bounded in bytes: 65536, 64KiB, 1MiB), " +
	"or redis://HOST:PORT[/DB] as the last tier (rediss:// for TLS, unix:///PATH for a socket)"

// Tiered reports whether Backend is a stack of tiers: a comma-separated list
// of stores, the first one asked first (ParseTiers).
func (c Config) Tiered() bool { return strings.Contains(c.Backend, ",") }

// ParseTiers reads a stack of tiers, the first one first: two to MaxTiers
// stores separated by commas, each mem (an in-process tier, unbounded),
// mem?capacity=BYTES (one bounded in bytes, evicting the least recently used
// rows) or a Redis URL, which must be the last tier (the shared store behind
// the local ones); a comma inside a URL is written %2C. For example
// mem?capacity=1MiB,redis://127.0.0.1:6379/0. It refuses, naming every
// mistake at once, anything else.
func ParseTiers(backend string) ([]TierSpec, error) {
	parts := strings.Split(backend, ",")
	if len(parts) < 2 || len(parts) > MaxTiers {
		return nil, fmt.Errorf("%d stores given; want a stack of tiers: 2 to %d stores separated by commas, the first asked first (mem?capacity=1MiB,redis://HOST:PORT)",
			len(parts), MaxTiers)
	}
	var errs []error
	specs := make([]TierSpec, len(parts))
	kinds := map[string]int{}
	for i, part := range parts {
		spec, kind, err := parseTier(part, i == len(parts)-1)
		if err != nil {
			errs = append(errs, fmt.Errorf("tier %d %s: %w", i, redactedQuote(part), err))
			continue
		}
		specs[i], kinds[kind] = spec, kinds[kind]+1
		specs[i].Name = kind
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i := range specs {
		if kinds[specs[i].Name] > 1 {
			specs[i].Name += strconv.Itoa(i)
		}
	}
	return specs, nil
}

// parseTier reads one tier of a stack and returns it with its kind.
func parseTier(part string, last bool) (TierSpec, string, error) {
	head, query, hasQuery := strings.Cut(part, "?")
	if head != MemBackend {
		if part == "" {
			return TierSpec{}, "", fmt.Errorf("empty; %s", tierWant)
		}
		if msg := checkStoreURL(part, tierWant); msg != "" {
			if !strings.Contains(msg, "want") { // the Redis client's own words
				msg += "; want a URL backend/redis.Open takes (docs/backend-redis.md lists its query settings)"
			}
			return TierSpec{}, "", errors.New(msg)
		}
		if !last {
			return TierSpec{}, "", errors.New("a Redis store is the shared tier: want it last, behind the in-process ones (mem?capacity=1MiB,redis://HOST:PORT)")
		}
		return TierSpec{URL: part}, "redis", nil
	}
	if !hasQuery {
		return TierSpec{}, MemBackend, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return TierSpec{}, "", fmt.Errorf("the query %s does not parse (%v); want capacity=BYTES", quoteCut(query), err)
	}
	var spec TierSpec
	for k, vs := range q {
		if k != "capacity" {
			return TierSpec{}, "", fmt.Errorf("unknown setting %s; want capacity=BYTES, the one setting of an in-process tier", quoteCut(k))
		}
		if len(vs) != 1 {
			return TierSpec{}, "", fmt.Errorf("capacity is given %d times; want it once", len(vs))
		}
		n, err := parseBytes(vs[0])
		if err != nil {
			return TierSpec{}, "", fmt.Errorf("capacity=%s: %w", quoteCut(vs[0]), err)
		}
		if n < SlotBytes {
			return TierSpec{}, "", fmt.Errorf("capacity=%s holds no row of %d bytes; want at least %d, or no capacity for an unbounded tier", quoteCut(vs[0]), SlotBytes, SlotBytes)
		}
		spec.CapacityBytes = n
	}
	return spec, MemBackend, nil
}

// byteUnits are the suffixes parseBytes takes, binary and decimal.
var byteUnits = []struct {
	suffix string
	n      int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

// parseBytes reads a positive number of bytes, with an optional unit.
func parseBytes(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = rest, u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > maxTierBytes/mult {
		return 0, fmt.Errorf("want a whole number of bytes from 1 to 1TiB, with an optional unit B, KiB, MiB, GiB, KB, MB or GB (65536, 64KiB)")
	}
	return n * mult, nil
}

// redactedQuote quotes a tier for an error message, a URL's password
// redacted.
func redactedQuote(part string) string {
	if u, err := url.Parse(part); err == nil && u.User != nil {
		return quoteCut(u.Redacted())
	}
	return quoteCut(part)
}

// quoteCut quotes s for an error message, cut to a readable length.
func quoteCut(s string) string {
	const most = 80
	if len(s) > most {
		return strconv.Quote(s[:most]) + "…"
	}
	return strconv.Quote(s)
}

// unjoin splits an errors.Join into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
