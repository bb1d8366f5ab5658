package qp

import (
	"encoding/binary"
	"fmt"

	"github.com/xroce/xroce/bth"
)

// recvWQE is a posted receive work request. Its SGEs are resolved for
// each packet placed into it (memory.go).
type recvWQE struct {
	id       uint64
	sge      []SGE
	capacity uint32
}

// inMsg is the SEND or WRITE message the responder is in the middle of.
// A WRITE keeps the RETH's key and address, not the region: each packet
// is placed through a fresh lookup, so a region deregistered after
// WRITE_FIRST takes no byte of the WRITE_MIDDLE or WRITE_LAST that follow
// (they get the NAK of an invalid R_Key).
type inMsg struct {
	active bool // a FIRST was accepted, MIDDLE/LAST expected
	write  bool
	off    uint32   // bytes received so far
	total  uint32   // WRITE: the DMA length
	rkey   uint32   // WRITE: the RETH's R_Key
	va     uint64   // WRITE: the RETH's virtual address
	recv   *recvWQE // SEND: the receive request being filled
}

// resKind is what a responder resource holds.
type resKind uint8

const (
	resRead      resKind = iota + 1
	resAtomic            // CMP_SWAP or FETCH_ADD: the original value
	resPlacement         // ATOMIC_WRITE or FLUSH: an empty READ RESPONSE
)

// resource is a responder resource (max_dest_rd_atomic of them): a READ, atomic, ATOMIC_WRITE or FLUSH kept so that a duplicate
// is answered without executing the request again. A READ keeps its R_Key,
// address and length, not the memory: each response packet reads the
// region through a fresh lookup.
type resource struct {
	kind     resKind
	first    bth.PSN
	last     bth.PSN
	rkey     uint32 // READ: the request's R_Key, address and length
	va       uint64
	length   uint32
	orig     uint64 // atomic: the original remote value
	pending  bool   // responses remain to be sent
	sent     bool   // every response was sent once: the slot may be recycled
	startPSN bth.PSN
	sendPSN  bth.PSN
	seq      uint64 // allocation order
}

func (q *QP) rqAt(i uint32) *recvWQE { return &q.rq[i%uint32(len(q.rq))] }

// PostRecv queues a receive work request (ibv_post_recv). In ERR it
// completes at once with WR_FLUSH_ERR.
func (q *QP) PostRecv(wr *RecvWR) error {
	if q.srq != nil {
		return fmt.Errorf("post recv on qp %#x: it uses an SRQ: %w", q.qpn, ErrState)
	}
	if q.state == StateReset {
		return fmt.Errorf("post recv on qp %#x in %v: %w", q.qpn, q.state, ErrState)
	}
	if q.rqTail-q.rqHead >= q.rqCap {
		return fmt.Errorf("post recv on qp %#x: %w", q.qpn, ErrQueueFull)
	}
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("post recv on qp %#x: %d SGEs: %w", q.qpn, len(wr.SGL), ErrTooManySGE)
	}
	if q.rqTail-q.rqHead == uint32(len(q.rq)) {
		q.rq = growRing(q.rq, q.rqHead, q.rqTail, q.rqCap)
	}
	w := q.rqAt(q.rqTail)
	w.id = wr.ID
	w.sge = append(w.sge[:0], wr.SGL...)
	w.capacity = uint32(min(sglLength(wr.SGL), maxMsg))
	q.rqTail++
	if q.state == StateErr {
		q.recvCQ.Complete(q.wcOut(WC{ID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn}))
		q.rqHead++
	}
	return nil
}

// takeRecv returns the receive request at the head of the queue, nil if
// the queue is empty. Its SGL is resolved packet by packet (placeRecv), as
// rxe does: a bad SGE fails the message when a packet reaches it.
func (q *QP) takeRecv() *recvWQE {
	if q.srq != nil {
		return q.takeSRQ()
	}
	if q.rqHead != q.rqTail {
		return q.rqAt(q.rqHead)
	}
	return nil
}

// placeRecv writes p at offset off of w's buffers, resolving them now;
// false if they do not name local writable memory (any more).
func (q *QP) placeRecv(w *recvWQE, off uint32, p []byte) bool {
	if !q.resolveSGL(w.sge, off, uint32(len(p)), AccessLocalWrite) {
		return false
	}
	q.copyToSegs(p)
	return true
}

// completeRecv pops the head receive request with a completion.
func (q *QP) completeRecv(wc WC) {
	var w *recvWQE
	if q.srq != nil {
		w = &q.cur
		q.curHeld = false
	} else {
		w = q.rqAt(q.rqHead)
		q.rqHead++
	}
	wc.ID, wc.QPN = w.id, q.qpn
	q.recvCQ.Complete(q.wcOut(wc))
}

// wcOut copies wc into the QP's completion buffer, so that handing it to
// the CQ interface allocates nothing.
func (q *QP) wcOut(wc WC) *WC {
	q.wc = wc
	return &q.wc
}

func (q *QP) resetResponder() {
	q.in = inMsg{}
	q.nakSent = false
	q.ackDue = false
	q.overrun = false
	for i := range q.res {
		q.res[i] = resource{}
	}
	q.resActive = 0
}

// rcRequest is the RC responder (rxe_resp.c): PSN check, duplicates, then
// the operation.
func (q *QP) rcRequest(f *bth.Frame, op bth.Opcode) bool {
	if q.overrun {
		// Winding down to ERR (resourceFree): nothing more is taken.
		return q.drop(&q.e.stats.RxBadState, &q.stats.RxBadState)
	}
	psn := f.BTH.PSN()
	d := psn.Diff(q.ePSN)
	if d > 0 {
		// A gap: one NAK, then silence until the expected PSN comes.
		if !q.nakSent {
			q.nakSent = true
			q.count(&q.e.stats.SeqNaksTx, &q.stats.SeqNaksTx)
			q.sendAck(bth.NakPSNSeqError, q.ePSN)
		} else {
			q.count(&q.e.stats.RxOutOfSeq, &q.stats.RxOutOfSeq)
		}
		return true
	}
	if d < 0 {
		return q.duplicate(f, op, psn)
	}
	// Opcode sequence: MIDDLE and LAST continue the current message of
	// the same kind; anything else starts a new one.
	if op.IsMiddle() || !op.IsFirst() && op.IsLast() {
		if !q.in.active || q.in.write != op.IsWrite() {
			q.fatalNak(bth.NakInvalidRequest)
			return false
		}
	} else if q.in.active {
		q.fatalNak(bth.NakInvalidRequest)
		return false
	}
	if !q.payloadOK(op, len(f.Payload)) {
		q.fatalNak(bth.NakInvalidRequest)
		return false
	}
	var ok bool
	switch {
	case op.IsSend():
		ok = q.recvSend(f, op, true)
	case op.IsWrite():
		ok = q.recvWrite(f, op, true)
	case op == bth.RCReadRequest:
		ok = q.recvRead(f, psn)
	case op == bth.RCCompareSwap || op == bth.RCFetchAdd:
		ok = q.recvAtomic(f, op, psn)
	case op == bth.RCAtomicWrite || op == bth.RCFlush:
		ok = q.recvPlacement(f, op, psn)
	default:
		q.fatalNak(bth.NakInvalidRequest)
		return false
	}
	if !ok {
		return false // NAKed (RNR or error) and counted as a drop
	}
	q.nakSent = false
	if op != bth.RCReadRequest {
		q.ePSN = q.ePSN.Add(1)
	}
	if f.BTH.AckReq() && (op.IsSend() || op.IsWrite()) {
		q.ackDue = true
		q.ackPSN = psn
	}
	return true
}

// payloadOK checks a SEND or WRITE packet's length against the path MTU:
// FIRST and MIDDLE carry exactly one MTU, LAST 1..MTU, ONLY 0..MTU.
func (q *QP) payloadOK(op bth.Opcode, n int) bool {
	if !op.IsSend() && !op.IsWrite() {
		return true
	}
	switch {
	case op.IsFirst() && !op.IsLast(), op.IsMiddle():
		return n == int(q.mtu)
	}
	return n <= int(q.mtu)
}

// fatalNak sends an error NAK for the expected PSN and moves the QP to ERR
// (rxe's class C/D responder errors on RC).
func (q *QP) fatalNak(syn bth.Syndrome) { q.fatalNakAt(syn, q.ePSN) }

// fatalNakAt is fatalNak for the request at psn: a duplicate's, or a READ
// response's that can no longer be sent (rxe NAKs the packet's PSN).
func (q *QP) fatalNakAt(syn bth.Syndrome, psn bth.PSN) {
	q.count(&q.e.stats.ErrNaksTx, &q.stats.ErrNaksTx)
	switch syn {
	case bth.NakInvalidRequest:
		q.count(&q.e.stats.InvReqNaksTx, &q.stats.InvReqNaksTx)
	case bth.NakRemoteAccessError:
		q.count(&q.e.stats.RemAccessNaksTx, &q.stats.RemAccessNaksTx)
	default:
		q.count(&q.e.stats.RemOpNaksTx, &q.stats.RemOpNaksTx)
	}
	q.sendAck(syn, psn)
	q.toError()
}

// recvSend places a SEND packet into the receive request. reliable selects
// the RC behaviour (RNR NAK, error NAKs) over UC's silent drops. It returns
// false when the packet was not accepted.
func (q *QP) recvSend(f *bth.Frame, op bth.Opcode, reliable bool) bool {
	if op.IsFirst() {
		w := q.takeRecv()
		if w == nil {
			if reliable {
				q.nakSent = true
				q.count(&q.e.stats.RNRNaksTx, &q.stats.RNRNaksTx)
				q.sendAck(bth.RNRNakSyndrome(q.attr.MinRNRTimer), q.ePSN)
			}
			return q.drop(&q.e.stats.RxNoRecv, &q.stats.RxNoRecv)
		}
		q.in = inMsg{active: !op.IsLast(), recv: w}
	}
	w := q.in.recv
	n := uint32(len(f.Payload))
	if uint64(q.in.off)+uint64(n) > uint64(w.capacity) {
		q.in = inMsg{}
		q.completeRecv(WC{Status: WCLocLenErr, Opcode: WCRecv})
		if reliable {
			q.fatalNak(bth.NakInvalidRequest)
		}
		return false
	}
	if !q.placeRecv(w, q.in.off, f.Payload) {
		// A bad SGE, or a buffer deregistered during the message.
		q.in = inMsg{}
		q.completeRecv(WC{Status: WCLocProtErr, Opcode: WCRecv})
		if reliable {
			q.fatalNak(bth.NakRemoteOpError)
		}
		return false
	}
	q.in.off += n
	if !op.IsLast() {
		return true
	}
	wc := WC{Opcode: WCRecv, ByteLen: q.in.off, Solicited: f.BTH.SE()}
	if op.HasImm() {
		wc.Flags |= WCWithImm
		wc.Imm = f.ImmDt.Imm()
	}
	if f.IETH != nil {
		wc.Flags |= WCWithInv
		wc.InvKey = f.IETH.RKey()
		if !q.mem.Invalidate(wc.InvKey) {
			q.in = inMsg{}
			q.completeRecv(WC{Status: WCRemInvReqErr, Opcode: WCRecv})
			q.fatalNak(bth.NakInvalidRequest)
			return false
		}
	}
	q.in = inMsg{}
	q.msn++
	q.completeRecv(wc)
	return true
}

// recvWrite places a WRITE packet into the region its RETH names.
func (q *QP) recvWrite(f *bth.Frame, op bth.Opcode, reliable bool) bool {
	nak := func(syn bth.Syndrome) bool {
		q.in = inMsg{}
		if reliable {
			q.fatalNak(syn)
		}
		return false
	}
	var dst []byte // where this packet's payload goes
	if op.IsFirst() {
		// The whole DMA range is checked on the first packet, whose
		// payload goes at its start; a zero-length WRITE checks no R_Key
		// (rxe's check_rkey).
		va, rkey, n := f.RETH.VA(), f.RETH.RKey(), f.RETH.DMALen()
		if q.attr.AccessFlags&AccessRemoteWrite == 0 {
			return nak(bth.NakRemoteAccessError)
		}
		if n > 0 {
			var ok bool
			if dst, ok = q.remote(rkey, va, n, AccessRemoteWrite); !ok {
				return nak(bth.NakRemoteAccessError)
			}
		}
		q.in = inMsg{active: !op.IsLast(), write: true, total: n, rkey: rkey, va: va}
	}
	n := uint32(len(f.Payload))
	if uint64(q.in.off)+uint64(n) > uint64(q.in.total) || op.IsLast() && q.in.off+n != q.in.total {
		return nak(bth.NakInvalidRequest)
	}
	// Every later packet resolves its own bytes: the region may have been
	// deregistered since the first.
	if !op.IsFirst() && n > 0 {
		var ok bool
		if dst, ok = q.remote(q.in.rkey, q.in.va+uint64(q.in.off), n, AccessRemoteWrite); !ok {
			return nak(bth.NakRemoteAccessError)
		}
	}
	if op.HasImm() {
		// WRITE with immediate consumes a receive request: check first so
		// that an RNR NAK leaves nothing half done.
		if q.takeRecv() == nil {
			if reliable {
				q.nakSent = true
				q.count(&q.e.stats.RNRNaksTx, &q.stats.RNRNaksTx)
				q.sendAck(bth.RNRNakSyndrome(q.attr.MinRNRTimer), q.ePSN)
			} else {
				q.in = inMsg{}
			}
			return q.drop(&q.e.stats.RxNoRecv, &q.stats.RxNoRecv)
		}
	}
	copy(dst, f.Payload)
	q.in.off += n
	if !op.IsLast() {
		return true
	}
	total := q.in.total
	q.in = inMsg{}
	q.msn++
	if op.HasImm() {
		q.completeRecv(WC{Opcode: WCRecvRDMAWithImm, Flags: WCWithImm, Imm: f.ImmDt.Imm(), ByteLen: total, Solicited: f.BTH.SE()})
	}
	return true
}

// resourceFree reports whether a new READ, atomic, ATOMIC_WRITE or FLUSH
// may take a responder resource: the oldest slot is unused, or its
// responses were all sent once (a replay of them under way is abandoned:
// a requester within its limit has them already, else it could not have
// sent this request). A slot whose first responses are still waiting to
// go out means the requester has more READs and atomics outstanding than
// the max_dest_rd_atomic it was granted (IBTA Vol. 1 §9.7, responder
// resources; the requester's duty). Recycling that slot would lose the
// oldest request's response, as a batch of requests could before; the
// responder instead answers Invalid Request (the NAK's cause "too many
// RDMA READ or ATOMIC requests"), as the qib/hfi1 drivers do, while rxe
// recycles the slot because it never holds an unsent response. The
// request is not executed; the responder takes nothing more, sends the
// responses it owes, then the NAK for this PSN, and moves to ERR
// (flushResponses).
func (q *QP) resourceFree() bool {
	if r := &q.res[q.resNext%len(q.res)]; r.kind != 0 && !r.sent {
		q.overrun = true
		return false
	}
	return true
}

// allocResource takes the oldest responder resource slot (resourceFree
// said it may).
func (q *QP) allocResource(kind resKind, first, last bth.PSN) *resource {
	r := &q.res[q.resNext%len(q.res)]
	q.resNext++
	if r.pending {
		q.resActive--
	}
	*r = resource{kind: kind, first: first, last: last, seq: uint64(q.resNext)}
	return r
}

// findResource returns the kept resource whose PSN range holds psn.
func (q *QP) findResource(psn bth.PSN) *resource {
	for i := range q.res {
		r := &q.res[i]
		if r.kind != 0 && psn.Diff(r.first) >= 0 && psn.Diff(r.last) <= 0 {
			return r
		}
	}
	return nil
}

// readAllowed checks a READ request's RETH against the keys and bounds in
// force now (R_Key, range, the region's and the QP's remote read right):
// false is a remote access error.
func (q *QP) readAllowed(f *bth.Frame) bool {
	if q.attr.AccessFlags&AccessRemoteRead == 0 {
		return false
	}
	n := f.RETH.DMALen()
	if n == 0 {
		return true
	}
	if n > maxMsg {
		return false
	}
	_, ok := q.remote(f.RETH.RKey(), f.RETH.VA(), n, AccessRemoteRead)
	return ok
}

func (q *QP) readPackets(n uint32) uint32 {
	if n <= q.mtu {
		return 1
	}
	return (n + q.mtu - 1) / q.mtu
}

// rdAtomicAllowed enforces max_dest_rd_atomic = 0: a QP that keeps no
// responder resources takes no READ, atomic or ATOMIC_WRITE, and answers
// NAK Invalid Request as rxe does (check_resource,
// RESPST_ERR_TOO_MANY_RDMA_ATM_REQ); it sends the NAK and moves to ERR.
func (q *QP) rdAtomicAllowed() bool {
	if q.attr.MaxDestRdAtomic > 0 {
		return true
	}
	q.fatalNak(bth.NakInvalidRequest)
	return false
}

func (q *QP) recvRead(f *bth.Frame, psn bth.PSN) bool {
	if !q.rdAtomicAllowed() || !q.resourceFree() {
		return false
	}
	if !q.readAllowed(f) {
		q.fatalNak(bth.NakRemoteAccessError)
		return false
	}
	q.flushAck()
	n := f.RETH.DMALen()
	r := q.allocResource(resRead, psn, psn.Add(q.readPackets(n)-1))
	r.rkey, r.va, r.length = f.RETH.RKey(), f.RETH.VA(), n
	q.startResponse(r, psn)
	q.ePSN = r.last.Add(1)
	q.msn++
	return true
}

func (q *QP) recvAtomic(f *bth.Frame, op bth.Opcode, psn bth.PSN) bool {
	a := f.AtomicETH
	if !q.rdAtomicAllowed() || !q.resourceFree() {
		return false
	}
	if q.attr.AccessFlags&AccessRemoteAtomic == 0 {
		q.fatalNak(bth.NakRemoteAccessError)
		return false
	}
	if a.VA()%8 != 0 {
		q.fatalNak(bth.NakInvalidRequest)
		return false
	}
	b, ok := q.remote(a.RKey(), a.VA(), 8, AccessRemoteAtomic)
	if !ok {
		q.fatalNak(bth.NakRemoteAccessError)
		return false
	}
	q.flushAck()
	orig := binary.LittleEndian.Uint64(b)
	v := orig + a.SwapAdd()
	if op == bth.RCCompareSwap {
		v = orig
		if orig == a.Compare() {
			v = a.SwapAdd()
		}
	}
	binary.LittleEndian.PutUint64(b, v)
	r := q.allocResource(resAtomic, psn, psn)
	r.orig = orig
	q.startResponse(r, psn)
	q.msn++
	return true
}

// recvPlacement executes ATOMIC_WRITE (8 bytes written at once) and FLUSH
// (nothing to do: the engine's writes are visible when it returns) and
// answers both, as rxe does, with a zero-length READ RESPONSE ONLY kept as
// a responder resource.
func (q *QP) recvPlacement(f *bth.Frame, op bth.Opcode, psn bth.PSN) bool {
	va, n := f.RETH.VA(), f.RETH.DMALen()
	if !q.resourceFree() {
		return false
	}
	if op == bth.RCAtomicWrite {
		if !q.rdAtomicAllowed() {
			return false
		}
		if len(f.Payload) != 8 || n != 8 || va%8 != 0 {
			q.fatalNak(bth.NakInvalidRequest)
			return false
		}
		b, ok := q.remote(f.RETH.RKey(), va, 8, AccessRemoteWrite)
		if !ok {
			q.fatalNak(bth.NakRemoteAccessError)
			return false
		}
		copy(b, f.Payload)
	} else if n > 0 {
		if _, ok := q.mem.Remote(f.RETH.RKey(), va, n, 0); !ok {
			q.fatalNak(bth.NakRemoteAccessError)
			return false
		}
	}
	q.flushAck()
	r := q.allocResource(resPlacement, psn, psn)
	q.startResponse(r, psn)
	q.msn++
	return true
}

func (q *QP) startResponse(r *resource, psn bth.PSN) {
	if !r.pending {
		q.resActive++
	}
	r.pending, r.startPSN, r.sendPSN = true, psn, psn
}

// duplicate answers a request the responder has already executed (IBTA
// Vol. 1 §9.7, duplicate requests; rxe's duplicate_request): SEND and WRITE are re-ACKed, the
// others answered from their responder resource, never executed again.
// It returns false when the request was dropped.
//
// A duplicate READ must match the resource it repeats: the same R_Key,
// and the address and length that the original implies for the PSN it
// restarts at (a requester going back N restarts a READ in its middle
// with VA and length moved by whole MTUs). Then its key and range are
// checked again against the regions in force now, as a new READ's would
// be (rxe rechecks the MR of a replayed READ), and a failure is a remote
// access error. A duplicate READ at a PSN whose resource is not kept, or
// that does not match it, is dropped (rxe drops it): executing it would let
// any spoofer who lands in the "behind" half of the PSN space read memory
// or draw responses many times its size.
func (q *QP) duplicate(f *bth.Frame, op bth.Opcode, psn bth.PSN) bool {
	q.count(&q.e.stats.Duplicates, &q.stats.Duplicates)
	switch {
	case op == bth.RCReadRequest:
		r := q.findResource(psn)
		if r == nil || r.kind != resRead {
			return false
		}
		off := uint64(psn.Diff(r.first)) * uint64(q.mtu)
		if f.RETH.RKey() != r.rkey || f.RETH.VA() != r.va+off || uint64(f.RETH.DMALen())+off != uint64(r.length) {
			return false
		}
		if !q.readAllowed(f) {
			q.fatalNakAt(bth.NakRemoteAccessError, psn)
			return false
		}
		q.flushAck()
		q.startResponse(r, psn)
	case op == bth.RCCompareSwap || op == bth.RCFetchAdd:
		// Answered from the saved original value: an atomic never runs
		// twice.
		r := q.findResource(psn)
		if r == nil || r.kind != resAtomic || r.first != psn {
			return false
		}
		q.flushAck()
		q.startResponse(r, psn)
	case op == bth.RCAtomicWrite || op == bth.RCFlush:
		// Replayed from the resource; an ATOMIC_WRITE no longer kept is
		// dropped rather than written again.
		r := q.findResource(psn)
		if r == nil || r.kind != resPlacement || r.first != psn {
			return false
		}
		q.flushAck()
		q.startResponse(r, psn)
	default:
		q.ackDue = true
		q.ackPSN = q.dupAckPSN(psn)
	}
	return true
}

// dupAckPSN is the PSN a duplicate SEND or WRITE at psn is acknowledged
// with: the last one received (ePSN − 1), but never one of a READ or
// atomic after psn, nor beyond it. A requester resends a duplicate when it
// lost our answers, and those may include the responses of a READ that
// follows it; an ACK covering that READ before its response is replayed
// says the READ is done, and rxe then completed it without data (the
// interop suite's rping read the previous turn's buffer back).
func (q *QP) dupAckPSN(psn bth.PSN) bth.PSN {
	ack := q.ePSN.Sub(1)
	for i := range q.res {
		r := &q.res[i]
		if r.kind != 0 && psn.Less(r.first) && !ack.Less(r.first) {
			ack = r.first.Sub(1)
		}
	}
	return ack
}

// flushAck sends the coalesced ACK now, before a response that must follow it.
func (q *QP) flushAck() {
	if q.ackDue {
		q.ackDue = false
		q.sendAck(bth.SyndromeACKNoCredits, q.ackPSN)
	}
}

// sendAck sends an ACKNOWLEDGE (ACK or NAK) for psn with the current MSN.
func (q *QP) sendAck(syn bth.Syndrome, psn bth.PSN) {
	if syn != bth.SyndromeACKNoCredits {
		q.flushAck()
	}
	buf := q.alloc()
	if buf == nil {
		return
	}
	ff := &q.ff
	ff.BTH = bth.BTHFields{Opcode: bth.RCAck, PKey: q.attr.PKey, DestQP: q.attr.DestQPN, PSN: psn}
	ff.AETH = bth.AETHFields{Syndrome: syn, MSN: bth.PSN(q.msn & bth.PSNMask)}
	q.send(buf, ff, 0)
}

// flushResponses sends pending READ responses and atomic ACKs, oldest
// first, then the coalesced ACK; after an overrun (resourceFree), once
// they are all out, the NAK Invalid Request that moves the QP to ERR.
func (q *QP) flushResponses() {
	for q.resActive > 0 && !q.blocked {
		var r *resource
		for i := range q.res {
			x := &q.res[i]
			if x.pending && (r == nil || x.seq < r.seq) {
				r = x
			}
		}
		if r == nil {
			q.resActive = 0
			break
		}
		for r.pending {
			if r.kind == resRead && q.paced(q.e.now) {
				return // READ responses are data: paced as requests
			}
			src, ok := q.responseSource(r)
			if !ok {
				q.revokedResponse(r)
				return
			}
			buf := q.alloc()
			if buf == nil {
				return
			}
			q.sendResponse(r, buf, src)
		}
	}
	if q.blocked {
		return
	}
	q.flushAck()
	if q.overrun && q.resActive == 0 {
		q.fatalNak(bth.NakInvalidRequest)
	}
}

// responseSpan returns the offset and length of r's response at r.sendPSN.
func (q *QP) responseSpan(r *resource) (off, n uint32) {
	if r.kind != resRead {
		return 0, 0
	}
	off = uint32(r.sendPSN.Diff(r.first)) * q.mtu
	return off, min(q.mtu, r.length-off)
}

// responseSource resolves the bytes of r's next READ response now; false
// when the region, or the QP's remote read right, is gone.
func (q *QP) responseSource(r *resource) ([]byte, bool) {
	off, n := q.responseSpan(r)
	if n == 0 {
		return nil, true
	}
	return q.remote(r.rkey, r.va+uint64(off), n, AccessRemoteRead)
}

// revokedResponse ends a READ whose region was deregistered while its
// responses were being sent: the response at r.sendPSN becomes a NAK
// Remote Access Error, the NAK its R_Key gets now, and the QP goes to ERR
// (the requester completes the READ with REM_ACCESS_ERR).
func (q *QP) revokedResponse(r *resource) {
	r.pending = false
	q.resActive--
	r.kind = 0 // a duplicate of it is dropped from now on
	q.fatalNakAt(bth.NakRemoteAccessError, r.sendPSN)
}

// sendResponse sends r's next response packet with src (responseSource)
// as its payload.
func (q *QP) sendResponse(r *resource, buf, src []byte) {
	ff := &q.ff
	psn := r.sendPSN
	ff.BTH = bth.BTHFields{PKey: q.attr.PKey, DestQP: q.attr.DestQPN, PSN: psn}
	ff.AETH = bth.AETHFields{Syndrome: bth.SyndromeACKNoCredits, MSN: bth.PSN(q.msn & bth.PSNMask)}
	if r.kind == resAtomic {
		ff.BTH.Opcode = bth.RCAtomicAck
		ff.AtomicAck = r.orig
	} else {
		first, last := psn == r.startPSN, psn == r.last
		switch {
		case first && last:
			ff.BTH.Opcode = bth.RCReadResponseOnly
		case first:
			ff.BTH.Opcode = bth.RCReadResponseFirst
		case last:
			ff.BTH.Opcode = bth.RCReadResponseLast
		default:
			ff.BTH.Opcode = bth.RCReadResponseMiddle
		}
		copy(buf[ff.HeaderLen():], src)
	}
	if l := q.send(buf, ff, len(src)); r.kind == resRead {
		q.onDataSent(l, q.e.now)
	}
	if psn == r.last {
		r.pending, r.sent = false, true
		q.resActive--
	} else {
		r.sendPSN = psn.Add(1)
	}
}

// ucRequest is the UC responder: no ACKs; a PSN gap drops the message in
// progress and the responder waits for the next FIRST or ONLY.
func (q *QP) ucRequest(f *bth.Frame, op bth.Opcode) bool {
	psn := f.BTH.PSN()
	if psn != q.ePSN && q.in.active {
		q.in = inMsg{}
	}
	q.ePSN = psn.Add(1)
	cont := op.IsMiddle() || !op.IsFirst() && op.IsLast()
	if cont && (!q.in.active || q.in.write != op.IsWrite()) || !cont && q.in.active || !q.payloadOK(op, len(f.Payload)) {
		q.in = inMsg{}
		return false
	}
	if op.IsSend() {
		return q.recvSend(f, op, false)
	}
	return q.recvWrite(f, op, false)
}

// grhSize is the room a UD receive buffer keeps for the GRH.
const grhSize = 40

// udRequest is the UD responder: Q_Key check, one packet per message, the
// GRH area first in the receive buffer.
func (q *QP) udRequest(f *bth.Frame, op bth.Opcode) bool {
	if f.DETH.QKey() != q.attr.QKey {
		return q.drop(&q.e.stats.RxBadKey, &q.stats.RxBadKey)
	}
	w := q.takeRecv()
	if w == nil {
		return q.drop(&q.e.stats.RxNoRecv, &q.stats.RxNoRecv)
	}
	n := uint32(len(f.Payload))
	if uint64(n)+grhSize > uint64(w.capacity) {
		q.completeRecv(WC{Status: WCLocLenErr, Opcode: WCRecv})
		return false
	}
	var grh [grhSize]byte
	if f.IPv4 != nil {
		copy(grh[20:], f.IPv4[:bth.IPv4Size])
	} else {
		copy(grh[:], f.IPv6[:bth.IPv6Size])
	}
	if !q.placeRecv(w, 0, grh[:]) || !q.placeRecv(w, grhSize, f.Payload) {
		q.completeRecv(WC{Status: WCLocProtErr, Opcode: WCRecv})
		return false
	}
	wc := WC{Opcode: WCRecv, Flags: WCWithGRH, ByteLen: n + grhSize, SrcQP: f.DETH.SrcQP(), Solicited: f.BTH.SE()}
	copy(wc.SrcMAC[:], f.SrcMAC())
	if op.HasImm() {
		wc.Flags |= WCWithImm
		wc.Imm = f.ImmDt.Imm()
	}
	q.completeRecv(wc)
	return true
}
