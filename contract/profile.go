package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Profile is the set of explicit assembly facts that must be validated before any
// staging hold, registration or extent exists. Every field is required; a
// missing field is an error, never a zero default.
//
// Validation restricts compatibility. It does not enable, qualify or certify a
// backend, a manager or a runtime path.
type Profile struct {
	ContractRevision     string      `json:"contract_revision"`
	BackendRevision      string      `json:"backend_revision"`
	BackendKind          string      `json:"backend_kind"`
	ManagerKind          string      `json:"manager_kind"`
	CacheDType           string      `json:"cache_dtype"`
	AttentionBackend     string      `json:"attention_backend"`
	AttentionKind        string      `json:"attention_kind"`
	Layout               string      `json:"layout"`
	Parallelism          Parallelism `json:"parallelism"`
	Staging              string      `json:"staging"`
	CommittedWholeBlocks bool        `json:"committed_whole_blocks"`
	ExtraFeatures        []string    `json:"extra_features"`
}

// Parallelism holds the tensor, data, pipeline and context parallel sizes.
type Parallelism struct {
	TP int `json:"tp"`
	DP int `json:"dp"`
	PP int `json:"pp"`
	CP int `json:"cp"`
}

// The first supported profile. Everything else is refused.
const (
	SupportedBackendKind      = "native_nixl"
	SupportedManagerKind      = "KVCacheManagerV2"
	SupportedCacheDType       = "bfloat16"
	SupportedAttentionBackend = "TRTLLM"
	SupportedAttentionKind    = "mha"
	SupportedLayout           = "HND"
	SupportedStaging          = "manager_host"
)

// SupportedProfile returns the one supported profile, naming backendRevision as
// the backend build and [Revision] as the contract revision (a profile naming
// [RevisionCancelRequest] instead is supported as well).
func SupportedProfile(backendRevision string) Profile {
	return Profile{
		ContractRevision:     Revision,
		BackendRevision:      backendRevision,
		BackendKind:          SupportedBackendKind,
		ManagerKind:          SupportedManagerKind,
		CacheDType:           SupportedCacheDType,
		AttentionBackend:     SupportedAttentionBackend,
		AttentionKind:        SupportedAttentionKind,
		Layout:               SupportedLayout,
		Parallelism:          Parallelism{TP: 1, DP: 1, PP: 1, CP: 1},
		Staging:              SupportedStaging,
		CommittedWholeBlocks: true,
		ExtraFeatures:        []string{},
	}
}

// Problem says what kind of violation a FieldError is.
type Problem int

// The kinds of profile violation.
const (
	// Unsupported: the field is well-formed but names something not supported.
	Unsupported Problem = iota
	// Missing: the field is absent (or, in a Go value, blank).
	Missing
	// UnknownKey: a JSON key that no profile field has.
	UnknownKey
	// WrongType: the JSON value has the wrong type for its field.
	WrongType
	// DuplicateKey: a JSON key given twice.
	DuplicateKey
)

var problemNames = [...]string{"unsupported", "missing", "unknown key", "wrong type", "duplicate key"}

// String names the problem.
func (p Problem) String() string {
	if p < 0 || int(p) >= len(problemNames) {
		return "problem(" + strconv.Itoa(int(p)) + ")"
	}
	return problemNames[p]
}

// FieldError is one profile violation. Field is the JSON key, with a dot for a
// nested key ("parallelism.tp"); Given is what was supplied, as JSON would show it
// (empty when missing); Supported says what is accepted.
type FieldError struct {
	Field     string
	Problem   Problem
	Given     string
	Supported string
}

// Error names the field, what was given and what is supported.
func (e *FieldError) Error() string {
	switch e.Problem {
	case Missing:
		return fmt.Sprintf("%s: missing; supported %s", e.Field, e.Supported)
	case UnknownKey:
		return fmt.Sprintf("%s: unknown key (given %s); a profile has only the keys %s", e.Field, e.Given, e.Supported)
	case DuplicateKey:
		return fmt.Sprintf("%s: duplicate key; each key may appear once", e.Field)
	case WrongType:
		return fmt.Sprintf("%s: wrong type: given %s, supported %s", e.Field, e.Given, e.Supported)
	default:
		return fmt.Sprintf("%s: given %s, supported %s", e.Field, e.Given, e.Supported)
	}
}

// ProfileError carries every violation found in one profile, in field order.
// errors.As finds each *FieldError through it.
type ProfileError struct {
	Violations []*FieldError
}

// Error lists every violation, one per line.
func (e *ProfileError) Error() string {
	lines := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		lines[i] = v.Error()
	}
	return "unsupported runtime profile:\n" + strings.Join(lines, "\n")
}

// Unwrap returns the violations, so errors.As and errors.Is see each one.
func (e *ProfileError) Unwrap() []error {
	errs := make([]error, len(e.Violations))
	for i, v := range e.Violations {
		errs[i] = v
	}
	return errs
}

// Validate reports every violated field at once, as a *ProfileError, or nil when
// p is the supported profile. The contract revision may be either pinned
// revision, [Revision] or [RevisionCancelRequest], and nothing else. In a Go
// value a blank string is reported missing.
func (p Profile) Validate() error {
	var c checker
	p.check(&c, nil)
	return c.result()
}

// check appends p's violations to c, skipping the fields in skip (those already
// reported by the JSON loader, whose Go values are zero and meaningless).
func (p Profile) check(c *checker, skip map[string]bool) {
	want := func(field, given, supported string) {
		if skip[field] {
			return
		}
		if given == "" {
			c.add(field, Missing, "", strconv.Quote(supported))
			return
		}
		if given != supported {
			c.add(field, Unsupported, strconv.Quote(given), strconv.Quote(supported))
		}
	}
	if !skip["contract_revision"] {
		// Either pinned revision, byte for byte, and nothing else: the suffix
		// names a local extension, so no other suffix (nor the suffix alone) is
		// a revision.
		supported := strconv.Quote(Revision) + " or " + strconv.Quote(RevisionCancelRequest)
		switch p.ContractRevision {
		case Revision, RevisionCancelRequest:
		case "":
			c.add("contract_revision", Missing, "", supported)
		default:
			c.add("contract_revision", Unsupported, strconv.Quote(p.ContractRevision), supported)
		}
	}
	if !skip["backend_revision"] {
		const what = "a non-blank backend build identifier"
		switch {
		case p.BackendRevision == "":
			c.add("backend_revision", Missing, "", what)
		case strings.TrimSpace(p.BackendRevision) == "":
			c.add("backend_revision", Unsupported, strconv.Quote(p.BackendRevision), what)
		}
	}
	want("backend_kind", p.BackendKind, SupportedBackendKind)
	want("manager_kind", p.ManagerKind, SupportedManagerKind)
	want("cache_dtype", p.CacheDType, SupportedCacheDType)
	want("attention_backend", p.AttentionBackend, SupportedAttentionBackend)
	want("attention_kind", p.AttentionKind, SupportedAttentionKind)
	want("layout", p.Layout, SupportedLayout)
	axes := []struct {
		key  string
		size int
	}{{"tp", p.Parallelism.TP}, {"dp", p.Parallelism.DP}, {"pp", p.Parallelism.PP}, {"cp", p.Parallelism.CP}}
	for _, a := range axes {
		field := "parallelism." + a.key
		if skip["parallelism"] || skip[field] || a.size == 1 {
			continue
		}
		c.add(field, Unsupported, strconv.Itoa(a.size), "1")
	}
	want("staging", p.Staging, SupportedStaging)
	if !skip["committed_whole_blocks"] && !p.CommittedWholeBlocks {
		c.add("committed_whole_blocks", Unsupported, "false", "true (partial blocks are not supported)")
	}
	if !skip["extra_features"] {
		seen := map[string]bool{}
		for _, f := range p.ExtraFeatures {
			if seen[f] {
				continue
			}
			seen[f] = true
			c.add("extra_features", Unsupported, strconv.Quote(f), "no extra features")
		}
	}
}

type checker struct{ violations []*FieldError }

func (c *checker) add(field string, p Problem, given, supported string) {
	c.violations = append(c.violations, &FieldError{Field: field, Problem: p, Given: given, Supported: supported})
}

func (c *checker) result() error {
	if len(c.violations) == 0 {
		return nil
	}
	return &ProfileError{Violations: c.violations}
}

// profileKeys lists the JSON keys of a profile, in document order.
var profileKeys = []string{
	"contract_revision", "backend_revision", "backend_kind", "manager_kind", "cache_dtype",
	"attention_backend", "attention_kind", "layout", "parallelism", "staging",
	"committed_whole_blocks", "extra_features",
}

var parallelismKeys = []string{"tp", "dp", "pp", "cp"}

// IsProfileError reports whether err holds profile violations (as opposed to input
// that is not a JSON object at all).
func IsProfileError(err error) bool {
	var pe *ProfileError
	return errors.As(err, &pe)
}
