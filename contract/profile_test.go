package contract_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kvready/kvready/contract"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func supported() contract.Profile { return contract.SupportedProfile("mem-1.0") }

func TestSupportedProfileValidates(t *testing.T) {
	require.NoError(t, supported().Validate())
}

// TestRefusedProfiles covers every variant SPEC §2 lists as refused. Each must be
// reported with its JSON key, what was given and what is supported.
func TestRefusedProfiles(t *testing.T) {
	for _, tc := range []struct {
		desc   string
		change func(*contract.Profile)
		field  string
		given  string
	}{
		{"foreign contract revision", func(p *contract.Profile) { p.ContractRevision = "0000000000000000000000000000000000000000" }, "contract_revision", `"0000000000000000000000000000000000000000"`},
		{"revision with another suffix", func(p *contract.Profile) { p.ContractRevision = contract.Revision + "+cancel-request-v2" }, "contract_revision", `"` + contract.Revision + `+cancel-request-v2"`},
		{"the suffix alone", func(p *contract.Profile) { p.ContractRevision = "+cancel-request-v1" }, "contract_revision", `"+cancel-request-v1"`},
		{"suffixed revision with a trailing space", func(p *contract.Profile) { p.ContractRevision = contract.RevisionCancelRequest + " " }, "contract_revision", `"` + contract.RevisionCancelRequest + ` "`},
		{"suffix on a foreign revision", func(p *contract.Profile) { p.ContractRevision = "0+cancel-request-v1" }, "contract_revision", `"0+cancel-request-v1"`},
		{"blank backend revision", func(p *contract.Profile) { p.BackendRevision = "   " }, "backend_revision", `"   "`},
		{"missing backend revision", func(p *contract.Profile) { p.BackendRevision = "" }, "backend_revision", ""},
		{"mooncake", func(p *contract.Profile) { p.BackendKind = "mooncake" }, "backend_kind", `"mooncake"`},
		{"other manager", func(p *contract.Profile) { p.ManagerKind = "KVCacheManager" }, "manager_kind", `"KVCacheManager"`},
		{"float16", func(p *contract.Profile) { p.CacheDType = "float16" }, "cache_dtype", `"float16"`},
		{"FLASHINFER", func(p *contract.Profile) { p.AttentionBackend = "FLASHINFER" }, "attention_backend", `"FLASHINFER"`},
		{"mla", func(p *contract.Profile) { p.AttentionKind = "mla" }, "attention_kind", `"mla"`},
		{"NHD", func(p *contract.Profile) { p.Layout = "NHD" }, "layout", `"NHD"`},
		{"tp=2", func(p *contract.Profile) { p.Parallelism.TP = 2 }, "parallelism.tp", "2"},
		{"dp=2", func(p *contract.Profile) { p.Parallelism.DP = 2 }, "parallelism.dp", "2"},
		{"pp=2", func(p *contract.Profile) { p.Parallelism.PP = 2 }, "parallelism.pp", "2"},
		{"cp=2", func(p *contract.Profile) { p.Parallelism.CP = 2 }, "parallelism.cp", "2"},
		{"python_bounce", func(p *contract.Profile) { p.Staging = "python_bounce" }, "staging", `"python_bounce"`},
		{"partial blocks", func(p *contract.Profile) { p.CommittedWholeBlocks = false }, "committed_whole_blocks", "false"},
		{"compression", func(p *contract.Profile) { p.ExtraFeatures = []string{"compression"} }, "extra_features", `"compression"`},
		{"retry", func(p *contract.Profile) { p.ExtraFeatures = []string{"retry"} }, "extra_features", `"retry"`},
		{"unknown feature", func(p *contract.Profile) { p.ExtraFeatures = []string{"warp_drive"} }, "extra_features", `"warp_drive"`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			p := supported()
			tc.change(&p)
			err := p.Validate()
			require.Error(t, err)
			var fe *contract.FieldError
			require.True(t, errors.As(err, &fe), "a *FieldError must be reachable with errors.As")
			assert.Equal(t, tc.field, fe.Field)
			assert.Equal(t, tc.given, fe.Given)
			assert.NotEmpty(t, fe.Supported)
			assert.Contains(t, fe.Error(), tc.field)

			// The same refusal must come back through the JSON loader, naming the key.
			data, mErr := json.Marshal(p)
			require.NoError(t, mErr)
			_, lErr := contract.LoadProfile(data)
			require.Error(t, lErr)
			assert.Contains(t, lErr.Error(), tc.field+":")
		})
	}
}

// TestBothPinnedRevisionsAreSupported: a profile may name the pinned revision or
// the revision with the cancellation extension (SPEC §2), through Validate and
// through the JSON loader; a refusal of any other names both.
func TestBothPinnedRevisionsAreSupported(t *testing.T) {
	for _, rev := range []string{contract.Revision, contract.RevisionCancelRequest} {
		t.Run(rev, func(t *testing.T) {
			p := supported()
			p.ContractRevision = rev
			require.NoError(t, p.Validate())
			data, err := json.Marshal(p)
			require.NoError(t, err)
			got, err := contract.LoadProfile(data)
			require.NoError(t, err)
			assert.Equal(t, rev, got.ContractRevision)
		})
	}
	p := supported()
	p.ContractRevision = "x"
	var fe *contract.FieldError
	require.ErrorAs(t, p.Validate(), &fe)
	assert.Equal(t, `"`+contract.Revision+`" or "`+contract.RevisionCancelRequest+`"`, fe.Supported)
	_, err := contract.LoadProfile([]byte(replace(`"contract_revision":"147ed68276e7fb89d5de60002d4e793a78707a8c",`, ``)(goodJSON)))
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, contract.Missing, fe.Problem)
	assert.Contains(t, fe.Supported, contract.RevisionCancelRequest, "a missing revision names both supported ones")
}

func TestValidateReportsEveryViolation(t *testing.T) {
	p := contract.Profile{CacheDType: "float16", Parallelism: contract.Parallelism{TP: 2, DP: 1, PP: 1, CP: 1}}
	err := p.Validate()
	var pe *contract.ProfileError
	require.True(t, errors.As(err, &pe))
	var fields []string
	for _, v := range pe.Violations {
		fields = append(fields, v.Field)
	}
	assert.Equal(t, []string{
		"contract_revision", "backend_revision", "backend_kind", "manager_kind", "cache_dtype",
		"attention_backend", "attention_kind", "layout", "parallelism.tp", "staging", "committed_whole_blocks",
	}, fields)
	assert.Len(t, strings.Split(pe.Error(), "\n"), len(fields)+1, "one line per violation after the heading")
	assert.True(t, contract.IsProfileError(err))
}

const goodJSON = `{"contract_revision":"147ed68276e7fb89d5de60002d4e793a78707a8c","backend_revision":"mem-1.0",
"backend_kind":"native_nixl","manager_kind":"KVCacheManagerV2","cache_dtype":"bfloat16","attention_backend":"TRTLLM",
"attention_kind":"mha","layout":"HND","parallelism":{"tp":1,"dp":1,"pp":1,"cp":1},"staging":"manager_host",
"committed_whole_blocks":true,"extra_features":[]}`

func TestLoadProfileAcceptsTheSupportedProfile(t *testing.T) {
	p, err := contract.LoadProfile([]byte(goodJSON))
	require.NoError(t, err)
	assert.Equal(t, supported(), p)
	p2, err := contract.DecodeProfile([]byte(goodJSON))
	require.NoError(t, err)
	assert.Equal(t, p, p2)
}

// TestLoadProfileShapeErrors covers input that is one JSON object but has the
// wrong keys or types. Each is a *ProfileError naming the key.
func TestLoadProfileShapeErrors(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		edit    func(string) string
		field   string
		problem contract.Problem
	}{
		{"number for a bool", replace(`"committed_whole_blocks":true`, `"committed_whole_blocks":1`), "committed_whole_blocks", contract.WrongType},
		{"string for a bool", replace(`"committed_whole_blocks":true`, `"committed_whole_blocks":"true"`), "committed_whole_blocks", contract.WrongType},
		{"1.0 for an integer", replace(`"tp":1`, `"tp":1.0`), "parallelism.tp", contract.WrongType},
		{"exponent for an integer", replace(`"dp":1`, `"dp":1e0`), "parallelism.dp", contract.WrongType},
		{"string for an integer", replace(`"pp":1`, `"pp":"1"`), "parallelism.pp", contract.WrongType},
		{"array for parallelism", replace(`{"tp":1,"dp":1,"pp":1,"cp":1}`, `[1,1,1,1]`), "parallelism", contract.WrongType},
		{"missing axis", replace(`,"cp":1`, ``), "parallelism.cp", contract.Missing},
		{"unknown axis", replace(`"cp":1`, `"cp":1,"ep":1`), "parallelism.ep", contract.UnknownKey},
		{"number for a string", replace(`"cache_dtype":"bfloat16"`, `"cache_dtype":16`), "cache_dtype", contract.WrongType},
		{"null for a string", replace(`"layout":"HND"`, `"layout":null`), "layout", contract.WrongType},
		{"string for features", replace(`"extra_features":[]`, `"extra_features":"none"`), "extra_features", contract.WrongType},
		{"number among features", replace(`"extra_features":[]`, `"extra_features":[3]`), "extra_features[0]", contract.WrongType},
		{"null features", replace(`"extra_features":[]`, `"extra_features":null`), "extra_features", contract.WrongType},
		{"missing key", replace(`"staging":"manager_host",`, ``), "staging", contract.Missing},
		{"unknown key", replace(`"layout":"HND"`, `"layout":"HND","layuot":"HND"`), "layuot", contract.UnknownKey},
		{"duplicate key", replace(`"layout":"HND"`, `"layout":"HND","layout":"NHD"`), "layout", contract.DuplicateKey},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			input := tc.edit(goodJSON)
			require.NotEqual(t, goodJSON, input, "the edit must apply")
			for _, load := range []func([]byte) (contract.Profile, error){contract.LoadProfile, contract.DecodeProfile} {
				_, err := load([]byte(input))
				var pe *contract.ProfileError
				require.True(t, errors.As(err, &pe), "got %v", err)
				found := false
				for _, v := range pe.Violations {
					if v.Field == tc.field && v.Problem == tc.problem {
						found = true
					}
				}
				assert.True(t, found, "want %s %s among %v", tc.field, tc.problem, pe)
			}
		})
	}
}

func TestLoadProfileReportsShapeAndValueTogether(t *testing.T) {
	input := replace(`"cache_dtype":"bfloat16"`, `"cache_dtype":"float16"`)(replace(`"tp":1`, `"tp":1.5`)(goodJSON))
	_, err := contract.LoadProfile([]byte(input))
	var pe *contract.ProfileError
	require.True(t, errors.As(err, &pe))
	require.Len(t, pe.Violations, 2)
	assert.Equal(t, "cache_dtype", pe.Violations[0].Field)
	assert.Equal(t, contract.Unsupported, pe.Violations[0].Problem)
	assert.Equal(t, "parallelism.tp", pe.Violations[1].Field)
	assert.Equal(t, contract.WrongType, pe.Violations[1].Problem)

	_, err = contract.DecodeProfile([]byte(input))
	require.True(t, errors.As(err, &pe))
	assert.Len(t, pe.Violations, 1, "DecodeProfile checks shape only")
}

// TestLoadProfileReportsEveryAxis: one malformed parallelism axis does not hide
// the others (SPEC §2: every violated field at once, each naming the field,
// what was given and what is supported), and the axes read in document order
// whatever kind of violation each is.
func TestLoadProfileReportsEveryAxis(t *testing.T) {
	type violation struct {
		field   string
		problem contract.Problem
		given   string
	}
	for _, tc := range []struct {
		desc string
		axes string
		want []violation
	}{
		{"1.5, -1, 0, 1", `{"tp":1.5,"dp":-1,"pp":0,"cp":1}`, []violation{
			{"parallelism.tp", contract.WrongType, "number 1.5"},
			{"parallelism.dp", contract.Unsupported, "-1"},
			{"parallelism.pp", contract.Unsupported, "0"},
		}},
		{"a value before a type", `{"tp":2,"dp":"1","pp":1,"cp":1}`, []violation{
			{"parallelism.tp", contract.Unsupported, "2"},
			{"parallelism.dp", contract.WrongType, `string "1"`},
		}},
		{"a missing axis and a bad one", `{"tp":1,"dp":1,"pp":3}`, []violation{
			{"parallelism.pp", contract.Unsupported, "3"},
			{"parallelism.cp", contract.Missing, ""},
		}},
		{"an unknown axis hides nothing", `{"tp":1,"dp":2,"pp":1,"cp":1,"ep":1}`, []violation{
			{"parallelism.dp", contract.Unsupported, "2"},
			{"parallelism.ep", contract.UnknownKey, "number 1"},
		}},
		{"a repeated axis", `{"tp":4,"tp":1,"dp":1,"pp":1,"cp":1}`, []violation{
			{"parallelism.tp", contract.Unsupported, "4"},
			{"parallelism.tp", contract.DuplicateKey, "number 1"},
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			input := replace(`{"tp":1,"dp":1,"pp":1,"cp":1}`, tc.axes)(goodJSON)
			require.NotEqual(t, goodJSON, input)
			_, err := contract.LoadProfile([]byte(input))
			var pe *contract.ProfileError
			require.ErrorAs(t, err, &pe)
			var got []violation
			for _, v := range pe.Violations {
				got = append(got, violation{v.Field, v.Problem, v.Given})
				assert.Contains(t, v.Error(), v.Field+": ")
				if v.Problem != contract.DuplicateKey {
					assert.NotEmpty(t, v.Supported, "%s says what is supported", v.Field)
				}
			}
			assert.ElementsMatch(t, tc.want, got)
			assert.Equal(t, tc.want[0].field, got[0].field, "document order")
		})
	}
}

func TestLoadProfileSyntaxErrors(t *testing.T) {
	for _, tc := range []struct {
		desc, input, msg string
	}{
		{"empty", "", "empty input"},
		{"whitespace", "  \n", "empty input"},
		{"truncated", goodJSON[:40], "truncated"},
		{"not an object", "[1,2]", "want a JSON object"},
		{"a string", `"profile"`, "want a JSON object"},
		{"trailing object", goodJSON + `{}`, "trailing data"},
		{"trailing garbage", goodJSON + ` x`, "trailing data"},
		{"bad syntax", `{"layout" "HND"}`, "expected colon"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := contract.LoadProfile([]byte(tc.input))
			var se *contract.SyntaxError
			require.True(t, errors.As(err, &se), "got %v", err)
			assert.Contains(t, se.Error(), tc.msg)
			assert.False(t, contract.IsProfileError(err))
		})
	}
}

func TestProblemString(t *testing.T) {
	assert.Equal(t, "wrong type", contract.WrongType.String())
	assert.Equal(t, "problem(99)", contract.Problem(99).String())
}

func replace(old, new string) func(string) string {
	return func(s string) string { return strings.Replace(s, old, new, 1) }
}

// FuzzLoadProfile: the loader never panics; input it accepts round-trips and
// validates; decoding is deterministic.
func FuzzLoadProfile(f *testing.F) {
	f.Add([]byte(goodJSON))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"parallelism":{"tp":1.0}}`))
	f.Add([]byte(replace(`{"tp":1,"dp":1,"pp":1,"cp":1}`, `{"tp":1.5,"dp":-1,"pp":0,"cp":1}`)(goodJSON)))
	f.Add([]byte(replace(`147ed68276e7fb89d5de60002d4e793a78707a8c`, contract.RevisionCancelRequest)(goodJSON)))
	f.Add([]byte(goodJSON + "{}"))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p1, err1 := contract.DecodeProfile(data)
		p2, err2 := contract.DecodeProfile(data)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("decoding twice disagreed: %v vs %v", err1, err2)
		}
		if err1 != nil {
			if err1.Error() != err2.Error() {
				t.Fatalf("decoding twice gave different errors: %v vs %v", err1, err2)
			}
			return
		}
		v1, v2 := p1.Validate(), p2.Validate()
		if (v1 == nil) != (v2 == nil) || (v1 != nil && v1.Error() != v2.Error()) {
			t.Fatalf("validating twice disagreed: %v vs %v", v1, v2)
		}
		// An accepted profile re-encodes to JSON that decodes to the same profile.
		again, err := json.Marshal(p1)
		if err != nil {
			t.Fatal(err)
		}
		p3, err := contract.DecodeProfile(again)
		if err != nil {
			t.Fatalf("re-encoded profile refused: %v\n%s", err, again)
		}
		if p3.Validate() == nil != (v1 == nil) {
			t.Fatalf("round trip changed validity")
		}
		_, lErr := contract.LoadProfile(data)
		if (lErr == nil) != (v1 == nil) {
			t.Fatalf("LoadProfile (%v) disagrees with DecodeProfile+Validate (%v)", lErr, v1)
		}
	})
}
