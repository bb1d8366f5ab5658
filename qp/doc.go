// Package qp is xroce's transport engine: RoCE v2 queue pairs (RC, UC, UD)
// as pure, deterministic logic, after the InfiniBand Architecture
// Specification Volume 1, Release 1.4, chapter 9 (transport layer: §9.7
// reliable service, §9.8 unreliable service, §9.9 error handling) and
// chapter 10/11 (QP states and verbs), interoperating with the Linux
// kernel's soft-RoCE driver (drivers/infiniband/sw/rxe: the requester of
// rxe_req.c, the responder of rxe_resp.c, the completer of rxe_comp.c).
//
// An Engine owns queue pairs. It takes received frames and the current time
// (Input), and sends what is ready, runs its timers and reports its next
// deadline (Poll). It never starts goroutines, reads a clock or touches a
// socket: frames go out through an Output that lends it buffers (UMEM
// frames, so payload is copied once), memory is reached through a Memory
// that the verbs layer implements (the engine only reads and writes the
// slices it hands out), and completions go to a CQ.
//
// A typical owner loop (the verbs layer's worker, one per link queue):
//
//	n, _ := link.Receive(bufs, timeUntil(deadline))
//	engine.Input(bufs[:n], now())   // requests, responses, ACKs
//	link.Release(bufs[:n])          // Input keeps nothing
//	deadline = engine.Poll(now())   // sends through Output, runs timers
//
// with PostSend, PostRecv and Modify called on the same goroutine.
//
// Files follow the spec's parts: state.go (QP states, attributes, Modify,
// flush), requester.go (work requests, segmentation, PSNs, go-back-N),
// completer.go (ACKs, NAKs, READ responses, atomic ACKs), responder.go
// (PSN check, duplicates, receive queue, RDMA access checks, responder
// resources, FLUSH and ATOMIC_WRITE, UC and UD), srq.go (shared receive
// queues), timer.go (local ACK timeout, RNR wait), qp.go (Engine, QP
// creation, frame dispatch, Poll), sched.go (the QPs with work and the
// timer heap), budget.go (the transmit budget the RC QPs share,
// between peers and then in turns), queues.go (work queues that grow to their depths), cc.go (ECN,
// CNPs: RoCE v2 congestion notification, Annex A17.9), dcqcn.go (the
// reaction point, as ConnectX runs it), pace.go (the pacer and static
// rate limits).
//
// Interop choices follow rxe: AckReq on the last packet of a message and
// at least every 64 packets; at most 128 unacknowledged PSNs; ACKs carry
// credit code 31; retry_cnt 7 and rnr_retry 7 retry forever; a new QP's
// path MTU is 256 until modified; atomics operate on 8-byte little-endian
// (host order) words. Unlike rxe, which leaves it to the NIC and the
// fabric, the engine also bounds the packets all its RC QPs have in
// flight together (EngineConfig.MaxInflight), so that thousands of QPs
// share a link between software hosts instead of overrunning its rings.
package qp
