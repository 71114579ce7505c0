// Package peerucx holds no code: its tests run the shipped readiness.Engine
// over backend/peer over transfer/ucx between two real processes — the test
// process is the decode manager (the engine lending its staging slots
// through a peer.Receiver), a re-executed child the prefill (a peer.Sender)
// — and check from the bytes in the slots and the device rows, and from the
// engine's LeaseInfo and Stats, that a killed, paused or restarted prefill
// loses no page and corrupts nothing. It sits above both adapters, which
// may not import each other. docs/ucx.md says what the tests show.
package peerucx
