package qp

import (
	"fmt"
	"time"

	"github.com/xroce/xroce/bth"
)

// ackReqEvery is how many packets may go without AckReq (rxe asks at least
// every 64).
const ackReqEvery = 64

// maxMsg is the largest message (IBTA: 2^31 bytes).
const maxMsg = 1 << 31

// sendWQE is a posted send work request and its progress.
type sendWQE struct {
	wr     SendWR // wr.SGL aliases sge
	sge    []SGE
	av     AddressVector // UD destination, copied
	inline []byte        // the data of an inline request, copied when posted
	isInl  bool
	length uint32

	started  bool // PSNs assigned and SGL checked
	counted  bool // counted in rdOut
	localErr WCStatus
	firstPSN bth.PSN
	lastPSN  bth.PSN
	sendPSN  bth.PSN // next PSN to send
}

func (q *QP) sqAt(i uint32) *sendWQE { return &q.sq[i%uint32(len(q.sq))] }

// SendQueued returns the number of send requests posted and not yet
// completed (waiting to be sent, or sent and waiting for their
// acknowledgement).
func (q *QP) SendQueued() int { return int(q.sqTail - q.sqHead) }

// PostSend queues a send work request (ibv_post_send). The SGL is copied,
// inline data too. The memory behind a non-inline SGL is resolved again
// for each packet, so the request completes with LOC_PROT_ERR (and an RC
// QP goes to ERR) if its region is deregistered before its last packet
// has left or its last response has been placed. In ERR the request
// completes at once with WR_FLUSH_ERR.
func (q *QP) PostSend(wr *SendWR) error {
	if q.state < StateRTS {
		return fmt.Errorf("post send on qp %#x in %v: %w", q.qpn, q.state, ErrState)
	}
	if q.sqTail-q.sqHead >= q.sqCap {
		return fmt.Errorf("post send on qp %#x: %w", q.qpn, ErrQueueFull)
	}
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("post send on qp %#x: %d SGEs: %w", q.qpn, len(wr.SGL), ErrTooManySGE)
	}
	switch q.typ {
	case UC:
		if wr.Opcode != WRSend && wr.Opcode != WRSendWithImm && !wr.Opcode.isWrite() {
			return fmt.Errorf("post send %v on UC qp %#x: %w", wr.Opcode, q.qpn, ErrOpcode)
		}
	case UD:
		if wr.Opcode != WRSend && wr.Opcode != WRSendWithImm {
			return fmt.Errorf("post send %v on UD qp %#x: %w", wr.Opcode, q.qpn, ErrOpcode)
		}
		if wr.AV == nil {
			return fmt.Errorf("post send on UD qp %#x: no address vector: %w", q.qpn, ErrInvalidAttr)
		}
	default:
		if !wr.Opcode.isSend() && !wr.Opcode.isWrite() && !wr.Opcode.isReadLike() {
			return fmt.Errorf("post send on qp %#x: %v: %w", q.qpn, wr.Opcode, ErrOpcode)
		}
	}
	n := sglLength(wr.SGL)
	inl := wr.Flags&SendInline != 0 && (wr.Opcode.isSend() || wr.Opcode.isWrite())
	if inl && n > uint64(q.maxInl) {
		return fmt.Errorf("post send on qp %#x: %d bytes inline: %w", q.qpn, n, ErrInline)
	}
	if q.sqTail-q.sqHead == uint32(len(q.sq)) {
		q.sq = growRing(q.sq, q.sqHead, q.sqTail, q.sqCap)
	}
	w := q.sqAt(q.sqTail)
	if cap(w.sge) < q.maxSGE {
		w.sge = make([]SGE, 0, q.maxSGE) // once per slot
	}
	sge := w.sge[:len(wr.SGL)]
	copy(sge, wr.SGL)
	// Field by field, not w.wr = *wr: copying the SGL and AV pointers into
	// the queue would make every caller's SGL literal escape to the heap.
	w.wr = SendWR{
		ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags, SGL: sge, Imm: wr.Imm, InvKey: wr.InvKey,
		RemoteAddr: wr.RemoteAddr, RKey: wr.RKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap,
		RemoteQPN: wr.RemoteQPN, RemoteQKey: wr.RemoteQKey,
	}
	if wr.AV != nil {
		w.av = *wr.AV
	}
	if inl && cap(w.inline) < q.maxInl {
		w.inline = make([]byte, 0, q.maxInl) // once per slot
	}
	w.inline = w.inline[:0]
	w.isInl = inl
	w.started, w.counted, w.localErr = false, false, WCSuccess
	if n > maxMsg {
		w.localErr = WCLocLenErr
		n = 0
	}
	w.length = uint32(n)
	if inl {
		for _, s := range sge {
			if s.Length == 0 {
				continue
			}
			b, ok := q.mem.Local(s.LKey, s.Addr, s.Length, 0)
			if !ok {
				w.localErr = WCLocProtErr
				break
			}
			w.inline = append(w.inline, b...)
		}
	}
	q.sqTail++
	if q.state == StateErr || q.state == StateSQE {
		q.flushSQ()
	}
	q.wake()
	return nil
}

// startWQE assigns the request its PSNs after checking its SGL. It returns
// false when the request failed locally (its status is in localErr).
func (q *QP) startWQE(w *sendWQE) bool {
	op := w.wr.Opcode
	// A SEND or WRITE of one packet is checked when that packet resolves
	// its bytes, right after; longer ones and READs and atomics (whose
	// local memory is written only when the answer comes) are checked whole
	// before their first packet leaves.
	if w.localErr == WCSuccess && !w.isInl && (op.isReadLike() || w.length > q.mtu) && !q.checkSGL(w.wr.SGL, w.length, localAccess(op)) {
		w.localErr = WCLocProtErr
	}
	if w.localErr == WCSuccess {
		switch {
		case op.isAtomic() && w.length != 8:
			w.localErr = WCLocLenErr
		case q.typ == UD && w.length > q.mtu:
			w.localErr = WCLocLenErr
		}
	}
	if w.localErr != WCSuccess {
		return false
	}
	n := uint32(1)
	if !op.isAtomic() && w.length > q.mtu {
		n = (w.length + q.mtu - 1) / q.mtu
	}
	w.firstPSN = q.reqPSN
	w.lastPSN = q.reqPSN.Add(n - 1)
	w.sendPSN = w.firstPSN
	w.started = true
	return true
}

// runRequester sends as many request packets as the state, the window, the
// limits on READs and atomics and Output's buffers allow.
func (q *QP) runRequester(now time.Duration) {
	if q.state != StateRTS && q.state != StateSQD {
		return
	}
	if q.timer.rnrWait {
		return
	}
	for q.sqReq != q.sqTail && !q.blocked {
		w := q.sqAt(q.sqReq)
		if !w.started {
			if q.state == StateSQD {
				return
			}
			if w.wr.Flags&SendFence != 0 && q.rdOut > 0 {
				return
			}
			if w.wr.Opcode.isReadLike() && q.rdOut >= max(int(q.attr.MaxRdAtomic), 1) {
				return
			}
			if !q.startWQE(w) {
				q.failLocal(w)
				return
			}
		}
		if q.paced(now) || !q.mayStart() {
			return
		}
		if !q.resolvePayload(w) {
			// Its memory was deregistered while it was being sent.
			w.localErr = WCLocProtErr
			q.failLocal(w)
			return
		}
		buf := q.alloc()
		if buf == nil {
			q.dropSegs()
			return
		}
		done := q.sendPacket(w, buf)
		if q.typ == RC {
			q.onRequestSent(now)
			q.turnSent++
			q.recharge()
		}
		if done {
			q.sqReq++
			if w.wr.Opcode.isReadLike() && !w.counted {
				w.counted = true
				q.rdOut++
			}
			if q.typ != RC {
				// UC and UD complete when the last packet is out.
				q.sqHead = q.sqReq
				q.completeSend(w, WCSuccess)
			}
			if q.sqReq != q.sqTail {
				if nw := q.sqAt(q.sqReq); nw.started {
					nw.sendPSN = nw.firstPSN
				}
			}
		}
	}
}

// failLocal completes a request that failed locally (w.localErr) once the
// requests before it have completed, and stops the send queue: RC goes to
// ERR, UC and UD to SQE.
func (q *QP) failLocal(w *sendWQE) {
	if q.sqReq != q.sqHead {
		return // it completes in order, after the requests before it
	}
	q.popSend(w, w.localErr)
	if q.typ == RC {
		q.toError()
	} else {
		q.toSQE()
	}
}

// localAccess is the right an operation needs on its local memory: READs
// and atomics write their result there.
func localAccess(op WROpcode) Access {
	if op.isReadLike() {
		return AccessLocalWrite
	}
	return 0
}

// packetSpan returns the offset and payload length of w's packet at
// w.sendPSN (0 bytes for READ and atomic requests).
func (q *QP) packetSpan(w *sendWQE) (off, n uint32) {
	off = uint32(w.sendPSN.Diff(w.firstPSN)) * q.mtu
	if w.wr.Opcode.isReadLike() {
		return off, 0
	}
	return off, min(q.mtu, w.length-off)
}

// resolvePayload resolves the local memory of w's next packet into q.segs
// (nothing for inline data, READs and atomics); false if it is gone.
func (q *QP) resolvePayload(w *sendWQE) bool {
	off, n := q.packetSpan(w)
	if w.isInl || n == 0 {
		return true
	}
	return q.resolveSGL(w.wr.SGL, off, n, 0)
}

// sendPacket builds and sends w's packet at w.sendPSN, its payload from
// the inline copy or from q.segs (resolvePayload), and reports whether that
// was the request's last packet.
func (q *QP) sendPacket(w *sendWQE, buf []byte) bool {
	ff := &q.ff
	psn := w.sendPSN
	idx := uint32(psn.Diff(w.firstPSN))
	off := idx * q.mtu
	op := w.wr.Opcode
	last := psn == w.lastPSN
	first := idx == 0
	ff.BTH = bth.BTHFields{PKey: q.attr.PKey, DestQP: q.attr.DestQPN, PSN: psn}
	n := 0 // payload length
	var o bth.Opcode
	switch {
	case op == WRRDMARead:
		o = bth.RCReadRequest
		ff.RETH = bth.RETHFields{VA: w.wr.RemoteAddr + uint64(off), RKey: w.wr.RKey, DMALen: w.length - off}
		last = true
	case op.isAtomic():
		o = bth.RCFetchAdd
		ff.AtomicETH = bth.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
		if op == WRAtomicCmpAndSwp {
			o = bth.RCCompareSwap
			ff.AtomicETH.SwapAdd, ff.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
		}
		last = true
	default:
		n = int(min(q.mtu, w.length-off))
		o = dataOpcode(op, first, last)
		if o.Headers().Has(bth.ExtRETH) {
			ff.RETH = bth.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
		}
		ff.Imm, ff.IETH = w.wr.Imm, w.wr.InvKey
		switch q.typ {
		case UC:
			o |= bth.Opcode(bth.UC)
		case UD:
			o = bth.UDSendOnly
			if op == WRSendWithImm {
				o = bth.UDSendOnlyImm
			}
			qkey := w.wr.RemoteQKey
			if qkey&0x80000000 != 0 {
				qkey = q.attr.QKey
			}
			ff.DETH = bth.DETHFields{QKey: qkey, SrcQP: q.qpn}
			ff.BTH.DestQP = w.wr.RemoteQPN
		}
	}
	ff.BTH.Opcode = o
	ff.BTH.SE = last && w.wr.Flags&SendSolicited != 0 && (op.isSend() || op == WRRDMAWriteWithImm)
	q.noAck++
	if q.typ == RC && (last || q.noAck >= ackReqEvery || q.ackNow) {
		ff.BTH.AckReq = true
		q.noAck = 0
	}
	if q.typ == UD {
		saved := *ff
		ff.SrcMAC, ff.DstMAC, ff.SrcIP, ff.DstIP = w.av.SrcMAC, w.av.DstMAC, w.av.SrcIP, w.av.DstIP
		ff.TOS, ff.TTL, ff.FlowLabel = q.e.cc.tos(w.av.TrafficClass), w.av.HopLimit, w.av.FlowLabel
		if ff.TTL == 0 {
			ff.TTL = 64
		}
		q.placePayload(buf[ff.HeaderLen():], w, off, n)
		q.onDataSent(q.send(buf, ff, n), q.e.now)
		*ff = saved
	} else {
		q.placePayload(buf[ff.HeaderLen():], w, off, n)
		q.onDataSent(q.send(buf, ff, n), q.e.now)
	}
	if last {
		q.reqPSN = w.lastPSN.Add(1)
	} else {
		q.reqPSN = psn.Add(1)
		w.sendPSN = q.reqPSN
	}
	if q.reqPSN.Diff(q.sentPSN) > 0 {
		q.sentPSN = q.reqPSN
	}
	return last
}

// dataOpcode returns the RC opcode of a SEND or WRITE packet.
func dataOpcode(op WROpcode, first, last bool) bth.Opcode {
	if op.isWrite() {
		switch {
		case first && last && op == WRRDMAWriteWithImm:
			return bth.RCWriteOnlyImm
		case first && last:
			return bth.RCWriteOnly
		case first:
			return bth.RCWriteFirst
		case last && op == WRRDMAWriteWithImm:
			return bth.RCWriteLastImm
		case last:
			return bth.RCWriteLast
		}
		return bth.RCWriteMiddle
	}
	switch {
	case first && last && op == WRSendWithImm:
		return bth.RCSendOnlyImm
	case first && last && op == WRSendWithInv:
		return bth.RCSendOnlyInv
	case first && last:
		return bth.RCSendOnly
	case first:
		return bth.RCSendFirst
	case last && op == WRSendWithImm:
		return bth.RCSendLastImm
	case last && op == WRSendWithInv:
		return bth.RCSendLastInv
	case last:
		return bth.RCSendLast
	}
	return bth.RCSendMiddle
}

// placePayload copies the n payload bytes at offset off of w's message
// into dst: from the inline copy, or from q.segs, which it then drops.
func (q *QP) placePayload(dst []byte, w *sendWQE, off uint32, n int) {
	if n == 0 {
		return
	}
	if w.isInl {
		copy(dst[:n], w.inline[off:])
		return
	}
	q.copyFromSegs(dst)
}

// rewind restarts sending at psn (go-back-N): the request holding psn is
// sent again from that packet, and every later one from its start.
func (q *QP) rewind(psn bth.PSN) {
	if psn.Diff(q.reqPSN) > 0 {
		return // already sending from an earlier PSN
	}
	q.count(&q.e.stats.Retransmits, &q.stats.Retransmits)
	for i := q.sqHead; i != q.sqTail; i++ {
		w := q.sqAt(i)
		if !w.started {
			break
		}
		if psn.Diff(w.firstPSN) >= 0 && psn.Diff(w.lastPSN) <= 0 {
			w.sendPSN = psn
			if w.wr.Opcode.isAtomic() {
				w.sendPSN = w.firstPSN
			}
			for j := i; int32(q.sqReq-j) > 0; j++ {
				if x := q.sqAt(j); x.counted {
					x.counted = false
					q.rdOut--
				}
			}
			q.sqReq = i
			q.reqPSN = w.sendPSN
			q.noAck = 0
			if !q.outstanding() {
				q.timer.stop() // until the packets go again
			}
			return
		}
	}
}

// completeSend reports a send request's completion if it is signaled or
// failed.
func (q *QP) completeSend(w *sendWQE, st WCStatus) {
	if st == WCSuccess && !q.sigAll && w.wr.Flags&SendSignaled == 0 {
		return
	}
	wc := WC{ID: w.wr.ID, Status: st, Opcode: wcOpcodeOf(w.wr.Opcode), QPN: q.qpn}
	if st == WCSuccess && w.wr.Opcode == WRRDMARead {
		wc.ByteLen = w.length
	}
	q.sendCQ.Complete(q.wcOut(wc))
}
