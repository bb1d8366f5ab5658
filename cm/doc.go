// Package cm is RDMA connection management for xroce: the Communication
// Manager of IBTA Vol. 1 chapter 12 over QP 1 (annex A17 for RoCE v2), and
// librdmacm's addressing on top of it (rdma_cm: service IDs from port
// spaces and ports, the private-data header with IP addresses), so that a
// Go program connects to and accepts connections from rping, ucmatose,
// perftest -R, rsockets and every other program that connects with
// rdma_connect and rdma_accept, on rxe or on a hardware RNIC.
//
// # The engine
//
// Engine is the protocol itself, pure logic in the manner of package qp:
// it takes received MADs (Input), the caller's decisions (Connect, Accept,
// Reject, Establish, Disconnect, Destroy) and the time (Poll), and gives
// MADs to send (Output) and events (Handler). It starts no goroutines,
// reads no clock and allocates per connection, never per message. What it
// does follows the kernel's CM (drivers/infiniband/core/cm.c), which is
// what every peer of xroce runs or was tested against:
//
//   - REQ, REP and DREQ are resent every time-out, up to Max CM Retries
//     times; the REQ's time-out is twice the path's packet life time plus
//     the remote CM response time-out, the REP's and DREQ's the REQ's local
//     CM response time-out (§12.7.27, 12.7.30). A received MRA extends the
//     wait by its service time-out (§12.6.6).
//   - A duplicate REQ (same remote comm ID and CA GUID) is answered with an
//     MRA while the consumer decides, and otherwise ignored; a duplicate
//     REP after the RTU gets the RTU again (§12.9.6).
//   - A REQ from a QP a live connection of the same peer still uses is
//     refused as stale (REJ 10), and that connection is sent a DREQ; a
//     connection in time-wait no longer counts (cm_enter_timewait), so a
//     client that comes back at once with the same QP is served.
//   - The peer's DREQ is the consumer's to answer (EventDisconnectRequest,
//     then Disconnect or Destroy), as rdma_cm leaves a connection in
//     DREQ_RCVD until rdma_disconnect or rdma_destroy_id. A DREQ for no
//     connection is answered with a DREP; crossing DREQs are legal; after
//     a DREP or the DREQ's last time-out the connection stays in
//     time-wait, where it still answers, for the ACK time-out, and after
//     a DREP of ours until the peer's first resend of its DREQ too, but
//     never beyond MaxTimewait, whatever time-outs the peer's fields ask.
//   - A passive connection whose RTU was lost is established when its QP
//     takes its first packet (Notify, the kernel's COMM_EST), or failing
//     that when the REP times out and Handler.Received says so.
//   - State is bounded: Config.MaxConns connections in all, Config.Backlog
//     unanswered requests per listener; a REQ beyond them is refused (REJ 3,
//     no resources), junk MADs are counted and dropped. Time-wait is never
//     the reason: a new connection that finds no room replaces the oldest
//     connection in time-wait (as Linux's TCP beyond tcp_max_tw_buckets).
//
// # The binding
//
// Agent runs an Engine on a roce.Device: it owns the device's QP 1, one
// goroutine receives MADs and runs the engine's timers, and the rdma_cm
// layer (Listen, Dial, Request.Accept, Conn.Disconnect) maps CM fields onto
// QP attributes exactly as the kernel's rdma_cm does (see qpattrs.go).
// It tears connections down as rdma_cm does too: the peer's DREQ ends a
// Conn (Done, ErrDisconnected) but leaves its QP alone until the
// application's Disconnect or Close; QP.NotifyReceive gives it COMM_EST;
// and Agent.Close, since the process may exit right after, keeps
// answering the peers' resent DREQs until time-wait ends.
package cm
