package transfer

// The transport: the surface a communication engine offers a transfer,
// shaped on UCX's UCP (the engine under NIXL) so that a UCX binding is a thin
// adapter: a worker (Transport) that registers memory and packs remote keys
// (ucp_mem_map, ucp_rkey_pack), endpoints to peers (ucp_ep_create) that post
// one-sided puts and gets (ucp_put_nbx, ucp_get_nbx) and active messages
// (ucp_am_send_nbx) and can be flushed and closed (ucp_ep_flush_nbx,
// ucp_ep_close_nbx), a worker flush (ucp_worker_flush_nbx), progress
// (ucp_worker_progress) that runs the handlers, and endpoint errors
// (ucp_ep_params_t.err_handler). Non-blocking operations return a Request to
// test, as UCX's nbx calls return a request pointer or UCS_OK.
//
// What a transport's events prove is the transport's to state, not this
// interface's: a put request completing proves the put landed (remote
// completion, as a UCX flush does); a message arriving proves nothing about
// puts posted before it on the same endpoint unless the sender flushed
// between them; revoking a registration refuses later operations, and stops
// operations already posted only where Revoke says it fenced.
//
// Package transfer/transporttest checks a Transport against these rules,
// each by name (docs/transfers.md, "A conformance kit for transports").

// Request is one non-blocking operation in flight.
type Request interface {
	// Test never blocks: done reports whether the operation completed, err
	// whether it failed (ucp_request_check_status).
	Test() (done bool, err error)
}

// Revocation is what revoking a registration proved.
type Revocation uint8

const (
	// RevokedFenced: no operation — posted before the revocation or after —
	// touches the memory once Revoke returned (a registration torn down on
	// RDMA hardware: in-flight remote access fails).
	RevokedFenced Revocation = iota + 1
	// RevokedNewOnly: the revocation does not fence. Operations already
	// posted may still land (shared memory written with process_vm_writev:
	// nothing in flight can be recalled); later ones are refused where the
	// transport can refuse them — UCX's software RMA, behind transfer/ucx's
	// OneSided mode, refuses not even those. Each accessor settles on its
	// own evidence.
	RevokedNewOnly
)

// String names the revocation.
func (r Revocation) String() string {
	switch r {
	case RevokedFenced:
		return "fenced"
	case RevokedNewOnly:
		return "new-only"
	}
	return "revocation(?)"
}

// Fences reports whether the revocation stopped operations already posted.
func (r Revocation) Fences() bool { return r == RevokedFenced }

// Memory is one registration of local memory for remote access — on the
// receiver, a session's pages under their allocation-generation lease.
type Memory interface {
	// PackedKey is the packed remote key a peer unpacks to reach the memory
	// (ucp_rkey_pack): the address published to it, sent only after
	// negotiation.
	PackedKey() []byte
	// Len is the registered length; remote offsets run from 0 to Len.
	Len() int
	// Revoke ends the registration (ucp_mem_unmap) and answers what that
	// proved: RevokedFenced, nothing touches the memory once it returned;
	// RevokedNewOnly, less (see there). Idempotent: a second call answers
	// the same.
	Revoke() (Revocation, error)
}

// RemoteKey is a peer's packed key unpacked on one endpoint
// (ucp_ep_rkey_unpack).
type RemoteKey interface {
	// Len is the remote registration's length.
	Len() int
}

// Endpoint is a connection to one incarnation of one peer.
type Endpoint interface {
	// Peer names the peer and the incarnation this endpoint reaches.
	Peer() (Peer, Incarnation)
	// UnpackKey unpacks a key the peer published. A key this incarnation
	// of the peer did not pack — another peer's, an earlier life's, bytes
	// nobody packed — is refused, or every operation with it fails: a key
	// reaches only the registration it was packed for.
	UnpackKey(packed []byte) (RemoteKey, error)
	// Put writes src into the peer's memory at off. src is read until the
	// request completes and must not change before then. A range outside
	// [0, key.Len()) is refused and writes nothing.
	Put(src []byte, key RemoteKey, off int) (Request, error)
	// Get reads the peer's memory at off into dst, which is written until
	// the request completes. A range outside [0, key.Len()) is refused.
	Get(dst []byte, key RemoteKey, off int) (Request, error)
	// Send sends an active message (a report). Messages are not ordered
	// with puts and gets on the endpoint: a message may arrive before data
	// posted earlier lands, unless the sender flushed between them. One sent
	// on a working endpoint arrives once, intact, while both processes live.
	Send(msg []byte) (Request, error)
	// Flush completes when every put and get posted on the endpoint before
	// it has completed remotely.
	Flush() (Request, error)
	// Close flushes and closes the endpoint; later operations are refused.
	Close() (Request, error)
	// Err is the endpoint's error (the peer died, the connection broke), or
	// nil while it works.
	Err() error
}

// ReportCarrier is an Endpoint whose puts can carry a report: the owner
// applies the put and only then hands the report to its Handlers.Message,
// in the same Progress, as if it had been sent on the endpoint; a put the
// owner refuses, or that fails, drops its report. So a report carried by a
// writer's last put — its other puts completed — arrives only once every
// put of the writer landed, as a report sent after a Flush does, with one
// message fewer and no round trip between the data and the report.
type ReportCarrier interface {
	Endpoint
	// MaxCarried is the largest report PutReport carries; 0: none.
	MaxCarried() int
	// PutReport is Put carrying msg (copied before it returns). The
	// request completes as Put's: once the owner applied the put, and its
	// report was handed to the owner's handlers, or refused it.
	PutReport(src []byte, key RemoteKey, off int, msg []byte) (Request, error)
}

// Handlers are what a transport calls from Progress, on the caller's
// goroutine.
type Handlers struct {
	// Message receives an active message from one incarnation of a peer.
	Message func(from Peer, inc Incarnation, msg []byte)
	// EndpointError reports that the connection to an incarnation of a peer
	// failed: it will send nothing more. It proves nothing about operations
	// it already posted.
	EndpointError func(peer Peer, inc Incarnation, err error)
}

// Transport is one process's communication engine (a UCP worker).
type Transport interface {
	// Self names this process and its incarnation.
	Self() (Peer, Incarnation)
	// Register makes mem remotely accessible.
	Register(mem []byte) (Memory, error)
	// Connect opens an endpoint to the current incarnation of peer.
	Connect(peer Peer) (Endpoint, error)
	// SetHandlers sets what Progress calls.
	SetHandlers(h Handlers)
	// Progress runs the handlers for what arrived and answers how many
	// events it handled; it never blocks.
	Progress() int
	// Flush completes when every operation posted on every endpoint of
	// this transport has completed remotely.
	Flush() Request
}
