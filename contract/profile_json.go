package contract

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// SyntaxError reports input that is not exactly one JSON object: empty,
// truncated, malformed, not an object, or followed by trailing data.
type SyntaxError struct {
	Offset int64  // byte offset where the input broke
	Msg    string // what was wrong there
}

// Error says what broke and where.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("profile is not one JSON object: %s at byte %d", e.Msg, e.Offset)
}

// DecodeProfile reads a profile from JSON strictly: exactly one object, each key
// once, no unknown or missing keys, every value of its field's type (a bool for
// committed_whole_blocks, an object of integer literals for parallelism, an array
// of strings for extra_features). Input that is not one JSON object gives a
// *SyntaxError; a well-formed object with wrong keys or types gives a
// *ProfileError listing all of them. It does not check whether the values are
// supported: use [LoadProfile] or [Profile.Validate] for that.
func DecodeProfile(data []byte) (Profile, error) {
	p, c, _, err := decodeProfile(data)
	if err != nil {
		return Profile{}, err
	}
	if err := c.result(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// LoadProfile decodes a profile as [DecodeProfile] does and validates it as
// [Profile.Validate] does, reporting every problem of both kinds at once in one
// *ProfileError. It returns the profile only when it is the supported one.
func LoadProfile(data []byte) (Profile, error) {
	p, c, bad, err := decodeProfile(data)
	if err != nil {
		return Profile{}, err
	}
	p.check(&c, bad)
	slices.SortStableFunc(c.violations, func(a, b *FieldError) int {
		ta, sa := fieldRank(a.Field)
		tb, sb := fieldRank(b.Field)
		return cmp.Or(cmp.Compare(ta, tb), cmp.Compare(sa, sb))
	})
	if err := c.result(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// fieldRank orders violations as a profile lists its keys: by top-level key,
// then, inside parallelism, by axis (tp, dp, pp, cp, then unknown axes), so
// that shape and value violations of one object read in document order.
func fieldRank(field string) (top, sub int) {
	name, nested, _ := strings.Cut(field, ".")
	name, _, _ = strings.Cut(name, "[")
	top = slices.Index(profileKeys, name)
	if top < 0 {
		top = len(profileKeys)
	}
	if nested != "" {
		if sub = slices.Index(parallelismKeys, nested); sub < 0 {
			sub = len(parallelismKeys)
		}
	}
	return top, sub
}

// decodeProfile returns the decoded fields, the shape violations, and the set of
// fields whose Go values are not meaningful because they were missing or of the
// wrong type. A parallelism axis is judged on its own ("parallelism.tp"), so
// that one malformed axis does not hide the others' values.
func decodeProfile(data []byte) (Profile, checker, map[string]bool, error) {
	var p Profile
	var c checker
	bad := map[string]bool{}
	seen, err := decodeObject(data, &c, "", func(key string, raw json.RawMessage) {
		if !slices.Contains(profileKeys, key) {
			c.add(key, UnknownKey, describe(raw), strings.Join(profileKeys, ", "))
			return
		}
		decodeField(&p, key, raw, &c, bad)
	})
	if err != nil {
		return Profile{}, checker{}, nil, err
	}
	for _, key := range profileKeys {
		if !seen[key] {
			c.add(key, Missing, "", supportedJSON(key))
			bad[key] = true
		}
	}
	return p, c, bad, nil
}

// decodeObject walks one JSON object, calling field for each key's first
// occurrence and recording repeats as violations under prefix. It returns the
// keys seen, or a *SyntaxError when data is not exactly one object.
func decodeObject(data []byte, c *checker, prefix string, field func(string, json.RawMessage)) (map[string]bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(dec, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, &SyntaxError{Offset: 0, Msg: fmt.Sprintf("want a JSON object, found %s", describeToken(tok))}
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(dec, err)
		}
		key, _ := tok.(string) // the decoder only yields strings as object keys
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntaxError(dec, err)
		}
		if seen[key] {
			c.add(prefix+key, DuplicateKey, describe(raw), "")
			continue
		}
		seen[key] = true
		field(key, raw)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntaxError(dec, err)
	}
	end := dec.InputOffset()
	if tok, err := dec.Token(); err != io.EOF {
		what := "trailing data after the object"
		if err == nil {
			what = fmt.Sprintf("trailing data (%s) after the object", describeToken(tok))
		}
		return nil, &SyntaxError{Offset: end, Msg: what}
	}
	return seen, nil
}

func syntaxError(dec *json.Decoder, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return &SyntaxError{Offset: se.Offset, Msg: se.Error()}
	case err == io.EOF && dec.InputOffset() == 0:
		return &SyntaxError{Offset: 0, Msg: "empty input"}
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return &SyntaxError{Offset: dec.InputOffset(), Msg: "truncated input"}
	default:
		return &SyntaxError{Offset: dec.InputOffset(), Msg: err.Error()}
	}
}

var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// decodeField stores raw into p's field key, or records why it cannot and
// marks the field (for parallelism, each axis that could not be read) in bad.
func decodeField(p *Profile, key string, raw json.RawMessage, c *checker, bad map[string]bool) {
	wrong := func(field, want string) {
		c.add(field, WrongType, describe(raw), want)
		bad[field] = true
	}
	switch key {
	case "parallelism":
		if kindOf(raw) != "object" {
			wrong(key, `an object {"tp":1,"dp":1,"pp":1,"cp":1}`)
			return
		}
		axes := map[string]*int{"tp": &p.Parallelism.TP, "dp": &p.Parallelism.DP, "pp": &p.Parallelism.PP, "cp": &p.Parallelism.CP}
		seen, _ := decodeObject(raw, c, "parallelism.", func(axis string, v json.RawMessage) {
			field := "parallelism." + axis
			dst, known := axes[axis]
			if !known {
				c.add(field, UnknownKey, describe(v), strings.Join(parallelismKeys, ", "))
				return
			}
			n, err := strconv.Atoi(string(v))
			if !integerLiteral.Match(v) || err != nil {
				c.add(field, WrongType, describe(v), "the integer 1")
				bad[field] = true
				return
			}
			*dst = n
		})
		for _, axis := range parallelismKeys {
			if !seen[axis] {
				c.add("parallelism."+axis, Missing, "", "1")
				bad["parallelism."+axis] = true
			}
		}
	case "committed_whole_blocks":
		switch string(raw) {
		case "true":
			p.CommittedWholeBlocks = true
		case "false":
			p.CommittedWholeBlocks = false
		default:
			wrong(key, "a boolean (true)")
		}
	case "extra_features":
		if kindOf(raw) != "array" {
			wrong(key, "an array of strings ([])")
			return
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			wrong(key, "an array of strings ([])")
			return
		}
		features := make([]string, 0, len(items))
		for i, item := range items {
			var s string
			if kindOf(item) != "string" || json.Unmarshal(item, &s) != nil {
				c.add(fmt.Sprintf("extra_features[%d]", i), WrongType, describe(item), "a string")
				bad[key] = true
				return
			}
			features = append(features, s)
		}
		p.ExtraFeatures = features
	default:
		var s string
		if kindOf(raw) != "string" || json.Unmarshal(raw, &s) != nil {
			wrong(key, "a string")
			return
		}
		*stringField(p, key) = s
	}
}

func stringField(p *Profile, key string) *string {
	switch key {
	case "contract_revision":
		return &p.ContractRevision
	case "backend_revision":
		return &p.BackendRevision
	case "backend_kind":
		return &p.BackendKind
	case "manager_kind":
		return &p.ManagerKind
	case "cache_dtype":
		return &p.CacheDType
	case "attention_backend":
		return &p.AttentionBackend
	case "attention_kind":
		return &p.AttentionKind
	case "layout":
		return &p.Layout
	case "staging":
		return &p.Staging
	}
	panic("contract: no string field " + key) // unreachable: keys come from profileKeys
}

// supportedJSON describes, as JSON, what a missing key should have held.
func supportedJSON(key string) string {
	s := SupportedProfile("<build id>")
	switch key {
	case "contract_revision":
		return strconv.Quote(Revision) + " or " + strconv.Quote(RevisionCancelRequest)
	case "backend_revision":
		return "a non-blank backend build identifier"
	case "parallelism":
		return `{"tp":1,"dp":1,"pp":1,"cp":1}`
	case "committed_whole_blocks":
		return "true"
	case "extra_features":
		return "[]"
	}
	return strconv.Quote(*stringField(&s, key))
}

func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// describe renders a JSON value for a message: its kind and, abbreviated, its
// text.
func describe(raw json.RawMessage) string {
	text := string(bytes.TrimSpace(raw))
	if len(text) > 40 {
		text = text[:37] + "..."
	}
	return kindOf(raw) + " " + text
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return strconv.Quote(t.String())
	case string:
		return "string " + strconv.Quote(t)
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%T %v", t, t)
	}
}
