package transporttest

import "fmt"

// The rules of the transport contract the kit checks, as a [Violation]
// names them. docs/transfers.md ("A conformance kit for transports") gives
// each with the UCX call it stands for.
const (
	// What a completion claims.
	RulePutCompletion = "put completion must mean remote completion: when a put's request completes without error, its bytes are in the target registration"
	RuleGetCompletion = "get completion must mean the data arrived: when a get's request completes without error, its destination holds the source's bytes, and nothing writes it after"
	RuleEndpointFlush = "an endpoint's Flush or Close completing means every put and get posted before it on that endpoint has landed"
	RuleWorkerFlush   = "a Transport.Flush completing means every put and get posted before it on any endpoint of that transport has landed"

	// What an operation may touch.
	RuleUntouched = "bytes outside an operation's range are never touched: a put writes only its target range, a get only its destination, and neither writes its source"
	RuleBounds    = "an operation outside the remote registration (offsets 0 to Len) is refused and touches nothing"

	// What must work, and finish.
	RuleAccepted       = "an operation between live peers, on an open endpoint, with the key of a registration not revoked and within its bounds, is accepted and completes without error"
	RuleCompletes      = "every request completes: a posted operation's Test reports done, with or without an error, within the kit's bound of progress rounds"
	RuleRequestOrError = "an operation answers a request or an error, never neither"
	RuleTestStable     = "a request, once complete, stays complete with the same error"
	RuleRegister       = "a live transport registers memory, and the registration's Len is the memory's length"

	// Calls that never block, nor panic.
	RuleTestNeverBlocks     = "Request.Test never blocks"
	RuleProgressNeverBlocks = "Progress never blocks"
	RulePostNeverBlocks     = "posting never blocks: Put, Get, Send, Flush, Close, Connect, UnpackKey, Register, Revoke and the rest return at once, as UCX's nbx calls do"
	RuleNoPanic             = "a transport never panics, whatever it is given"
	RuleHandlers            = "handlers run only inside Progress, on its caller's goroutine"

	// Registrations and keys.
	RuleRevokeAnswer   = "Revoke answers RevokedFenced or RevokedNewOnly, without an error, and a second Revoke answers the same"
	RuleRevokedRefuses = "a revoked registration refuses later operations: a put or get with its key fails, at posting or with an error, and never lands"
	RuleRevokeFences   = "a revocation that answered RevokedFenced fences: nothing touches the memory once Revoke returned"
	RuleKeyUnpacks     = "a key a live peer packed for a registration it has not revoked unpacks on an endpoint to that peer"
	RuleForeignKey     = "a key reaches only the registration its peer packed: another peer's key, or bytes no peer packed, fail to unpack or fail every operation"
	RuleOldKey         = "a key from a peer's old life never reaches its new life's memory"

	// Messages.
	RuleMessageIntact  = "a message arrives intact, at the incarnation it was sent to, attributed to the peer and incarnation that sent it"
	RuleMessageOnce    = "a message arrives at most once"
	RuleMessageArrives = "a message sent between live peers arrives"

	// Endpoints and lives.
	RuleClosedRefuses = "a closed endpoint refuses later operations: each fails, at posting or with an error, and none lands or arrives"
	RuleDeadPeer      = "an endpoint to a dead peer fails: its Err reports it, and operations posted after the death fail"
	RuleEndpointError = "the EndpointError handler is called for a peer that died, naming it and its dead incarnation with an error, and never names a live one"
	RuleIncarnation   = "each life of a process has an incarnation of its own: Self names the process and an incarnation no earlier life of it had"
	RuleEndpointPeer  = "an endpoint names the peer and incarnation it reaches, and Connect reaches the current one"

	// The harness, not the transport.
	RuleHarness = "the harness works: Join starts a process, Kill ends one, Step returns"
)

// Violation is one broken rule, found by the kit.
type Violation struct {
	// Rule is one of the Rule… constants.
	Rule string
	// Detail says what the kit saw.
	Detail string
}

// Error formats the violation as "transporttest: rule: detail".
func (v *Violation) Error() string { return "transporttest: " + v.Rule + ": " + v.Detail }

func violation(rule, format string, args ...any) *Violation {
	return &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)}
}
