// Package ucx is a transfer.Transport over UCX's UCP (the communication
// library NIXL runs on): one UCP context and worker per Transport, cgo to
// the Debian package libucx-dev (UCX 1.13 is what it is built and tested
// against). It is an adapter at the edge, like transfer/sim, whose
// adversarial double it stands beside.
//
// Peers find each other out of band: Transport.Address is a blob naming the
// process, its incarnation and its UCP worker address, which the caller
// carries to the other process (a pipe, a file, a control channel) and
// hands to AddPeer there; Connect then opens an endpoint (ucp_ep_create with
// peer error handling) to the latest incarnation recorded. No listener and no
// port: two processes a test starts exchange addresses over their pipes, and
// a second run beside the first shares nothing with it.
//
// Reports travel as active messages (ucp_am_send_nbx) carrying the sender's
// name and incarnation; the receiving worker hears a message only on an
// endpoint it opened to that very peer and incarnation (UCX matches the two
// directions of a connection, so the endpoint a message arrives on is the
// receiver's own), and Progress hands it to Handlers.Message. Endpoint
// errors (a peer that died) reach Handlers.EndpointError and Endpoint.Err.
//
// Puts and gets run in one of two modes (Config.Mode):
//
//   - Checked, the default: each put or get is an active message the owner's
//     worker applies, in its own Progress, only to a live registration of
//     the generation the key names, within its bounds, from an endpoint it
//     opened to the claimed sender. Nothing else writes the pages, so
//     Memory.Revoke fences on every UCX transport (tcp, shared memory, RDMA).
//     A put's request completes when the owner answered that it applied it.
//   - OneSided: ucp_put_nbx and ucp_get_nbx into memory mapped with
//     ucp_mem_map, as UCX moves them. Revoke (ucp_mem_unmap) answers
//     RevokedNewOnly, and that is generous: over tcp and shared memory UCX
//     1.13 moves such a put by software RMA, the owner's worker writing the
//     address it names without looking for a registration, so not even puts
//     posted after the unmap are refused; docs/ucx.md has the tests.
//
// Capabilities are exchanged by the transfer layer before any key is
// published; this package never sends a key itself.
package ucx
