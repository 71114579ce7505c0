package transporttest

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvready/kvready/transfer"

	"github.com/kvready/kvready/transfer/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withinTheContract are transfer/sim's faults a transport may have: a
// message overtaking the data posted before it, a dead sender's puts
// landing, a revocation that only refuses what comes after it (and says
// so), a DONE withheld for a while.
var withinTheContract = map[string]sim.Faults{
	"no faults":             {},
	"reports overtake data": {ReportsOvertakeData: true},
	"puts outlive sender":   {PutsOutliveSender: true},
	"revocation leaks":      {RevocationLeaks: true},
	"DONE masked":           {MaskDone: 0.5},
	"all of them":           {ReportsOvertakeData: true, PutsOutliveSender: true, RevocationLeaks: true, MaskDone: 0.5},
}

// The kit's trials pass over the simulated transport with every fault
// within the contract, and they check something: every kind of claim is
// read against the bytes, every refusal is seen, deaths are heard.
func TestTrialsPassAndCheckEveryRule(t *testing.T) {
	for name, f := range withinTheContract {
		t.Run(name, func(t *testing.T) {
			c := &counts{checked: map[string]int{}}
			cfg := newConfig(nil)
			cfg.counts = c
			v, seed := trials(simHarness(f), cfg, 150)
			require.Nil(t, v, "seed %d", seed)
			want := []string{
				"landed: " + RulePutCompletion, "landed: " + RuleGetCompletion,
				"landed: " + RuleEndpointFlush, "landed: " + RuleWorkerFlush,
				"refused: " + RuleClosedRefuses, "refused: " + RuleDeadPeer, "refused: " + RuleRevokedRefuses,
				"refused: " + RuleBounds, "refused: " + RuleForeignKey, "refused: " + RuleOldKey,
				"message arrived", "death heard", "new life",
			}
			if f.RevocationLeaks {
				want = append(want, "revoked: new-only")
			} else {
				want = append(want, "revoked: fenced")
			}
			for _, w := range want {
				assert.Positive(t, c.checked[w], "150 trials never checked %q: %v", w, c.checked)
			}
		})
	}
}

// breaks is the rule each broken transport breaks.
var breaks = map[fault]string{
	putEarly:              RulePutCompletion,
	getEarly:              RuleGetCompletion,
	onePast:               RuleUntouched,
	flushEarly:            RuleEndpointFlush,
	workerFlushEarly:      RuleWorkerFlush,
	fenceLies:             RuleRevokeFences,
	revokeIgnored:         RuleRevokedRefuses,
	putsNeverComplete:     RuleCompletes,
	testBlocks:            RuleTestNeverBlocks,
	progressBlocks:        RuleProgressNeverBlocks,
	wrongIncarnation:      RuleMessageIntact,
	alteredMessage:        RuleMessageIntact,
	closeKeepsOpen:        RuleClosedRefuses,
	staleSelf:             RuleIncarnation,
	noEndpointError:       RuleEndpointError,
	oldKeyAliased:         RuleOldKey,
	foreignKeyAliased:     RuleForeignKey,
	panicsOnGarbage:       RuleNoPanic,
	handlerOutside:        RuleHandlers,
	clipsOutOfBounds:      RuleBounds,
	errStaysNil:           RuleDeadPeer,
	peerStale:             RuleEndpointPeer,
	refusesKeys:           RuleKeyUnpacks,
	lenOffByOne:           RuleRegister,
	flapping:              RuleTestStable,
	nilRequest:            RuleRequestOrError,
	revokeFlips:           RuleRevokeAnswer,
	refusesGets:           RuleAccepted,
	putBlocks:             RulePostNeverBlocks,
	spuriousEndpointError: RuleEndpointError,
	dropsMessages:         RuleMessageArrives,
	duplicatesMessages:    RuleMessageOnce,
}

// The kit fails every broken transport, naming the rule it breaks: each
// fault is transfer/sim wrapped to break one rule. The trials are the
// kit's own (the ones Check draws), run on fixed seeds until one fails.
func TestKitNamesTheRuleABrokenTransportBreaks(t *testing.T) {
	for f := putEarly; f <= duplicatesMessages; f++ {
		rule, ok := breaks[f]
		require.True(t, ok, "fault %v has no expected rule: add it here", f)
		t.Run(f.String(), func(t *testing.T) {
			block := make(chan struct{})
			t.Cleanup(func() { close(block) })
			faults := sim.Faults{}
			if f == fenceLies {
				faults.RevocationLeaks = true
			}
			cfg := newConfig(nil)
			if f == testBlocks || f == progressBlocks || f == putBlocks {
				cfg = newConfig([]Option{CallBound(250 * time.Millisecond)}) // only the blocking call waits it out
			}
			v, seed := trials(brokenHarness(f, faults, block), cfg, 100)
			require.NotNil(t, v, "100 trials passed a transport that is %v", f)
			assert.Equal(t, rule, v.Rule, "seed %d: %v", seed, v)
			t.Logf("seed %d: %v", seed, v)
		})
	}
}

// deathless is a Net that cannot kill.
type deathless struct{ net Net }

func (d deathless) Join(name transfer.Peer) (transfer.Transport, error) { return d.net.Join(name) }
func (d deathless) Step() bool                                          { return d.net.Step() }
func (d deathless) Close() error                                        { return d.net.Close() }

func wrapHarness(h Harness, wrap func(Net) Net) Harness {
	return func(seed uint64) (Net, error) {
		n, err := h(seed)
		if err != nil {
			return nil, err
		}
		return wrap(n), nil
	}
}

// The kit needs neither an idle signal nor deaths: over a network whose
// Step always answers true it passes the simulated transport, and over one
// without Kill it draws no death — and still fails a broken transport
// within its bound.
func TestKitOverNetsThatCannotSayOrDoEverything(t *testing.T) {
	busy := func(n Net) Net { return alwaysStepping{n} }
	cfg := newConfig([]Option{Rounds(512)})
	v, seed := trials(wrapHarness(simHarness(sim.Faults{ReportsOvertakeData: true}), busy), cfg, 40)
	assert.Nil(t, v, "seed %d", seed)

	bn := func(seed uint64) (Net, error) {
		n, err := brokenHarness(putsNeverComplete, sim.Faults{}, nil)(seed)
		if err != nil {
			return nil, err
		}
		return alwaysStepping{n}, nil
	}
	v, _ = trials(bn, cfg, 40)
	require.NotNil(t, v)
	assert.Equal(t, RuleCompletes, v.Rule, v.Error())
	assert.Contains(t, v.Detail, "within 512 rounds")

	c := &counts{checked: map[string]int{}}
	cfg = newConfig(nil)
	cfg.counts = c
	v, seed = trials(wrapHarness(simHarness(sim.Faults{}), func(n Net) Net { return deathless{n} }), cfg, 60)
	assert.Nil(t, v, "seed %d", seed)
	assert.Zero(t, c.checked["death heard"]+c.checked["new life"], "a Net without Kill saw deaths: %v", c.checked)
	assert.Positive(t, c.checked["landed: "+RulePutCompletion])
}

// alwaysStepping never says it is idle, as a real transport's Net does not:
// the kit's waits end on what they wait for, or on the bound.
type alwaysStepping struct{ Net }

func (a alwaysStepping) Step() bool { a.Net.Step(); return true }
func (a alwaysStepping) Kill(name transfer.Peer) error {
	if k, ok := a.Net.(Killer); ok {
		return k.Kill(name)
	}
	return errors.New("cannot kill")
}

// failingNet's Join fails once the trial has begun.
type failingNet struct{ simNet }

func (failingNet) Join(name transfer.Peer) (transfer.Transport, error) {
	return nil, fmt.Errorf("no room for %q", name)
}

// A harness that fails is reported as the harness's fault, never as the
// transport's.
func TestKitNamesAFailingHarness(t *testing.T) {
	for name, h := range map[string]Harness{
		"no network": func(uint64) (Net, error) { return nil, errors.New("out of ports") },
		"no process": wrapHarness(simHarness(sim.Faults{}), func(n Net) Net { return failingNet{n.(simNet)} }),
	} {
		t.Run(name, func(t *testing.T) {
			v, _ := trials(h, newConfig(nil), 1)
			require.NotNil(t, v)
			assert.Equal(t, RuleHarness, v.Rule, v.Error())
		})
	}
}

// Check fails the test it is given with the violation, its rule named, and
// keeps rapid's failure file where FailFiles says, out of the package's
// testdata/.
func TestCheckFailsTheTestNamingTheRule(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fails")
	err := Run("TestCheckFailsTheTestNamingTheRule", func(tb TB) {
		Check(tb, brokenHarness(putEarly, sim.Faults{}, nil), FailFiles(dir))
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "transporttest: "+RulePutCompletion+":")
	files, gerr := filepath.Glob(filepath.Join(dir, "*.fail"))
	require.NoError(t, gerr)
	assert.Len(t, files, 1, err.Error())
	assert.NoDirExists(t, "testdata", "the kit left rapid's files in the package's testdata/")
	assert.NoError(t, Run("pass", func(tb TB) { Check(tb, simHarness(sim.Faults{})) }))
	assert.Equal(t, filepath.Join(os.TempDir(), "kvready-transporttest"), DefaultFailDir())
}

// Every rule the kit names is shown able to fail: a broken transport breaks
// it (breaks), or, for the harness's own rule, a broken harness does.
func TestEveryRuleIsShownToFail(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "rules.go", nil, 0)
	require.NoError(t, err)
	shown := map[string]bool{RuleHarness: true} // TestKitNamesAFailingHarness
	for _, rule := range breaks {
		shown[rule] = true
	}
	rules := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			for i, name := range spec.(*ast.ValueSpec).Names {
				if !strings.HasPrefix(name.Name, "Rule") {
					continue
				}
				rules++
				text, err := strconv.Unquote(spec.(*ast.ValueSpec).Values[i].(*ast.BasicLit).Value)
				require.NoError(t, err)
				assert.True(t, shown[text], "no broken transport breaks %s: add one to broken_test.go", name.Name)
			}
		}
	}
	assert.Equal(t, len(shown), rules, "the rules shown to fail and the rules declared differ")
}
