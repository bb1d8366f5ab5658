package qp

import (
	"encoding/binary"

	"github.com/xroce/xroce/bth"
)

// onResponse handles a packet from the responder: ACK or NAK, READ
// response or atomic ACK (the completer, rxe_comp.c's job).
func (q *QP) onResponse(f *bth.Frame, op bth.Opcode) bool {
	psn := f.BTH.PSN()
	// A response must be for a PSN that was sent.
	if !psn.Less(q.sentPSN) || psn.Diff(q.compPSN) < -maxWindow*2 {
		return false
	}
	switch {
	case op == bth.RCAck:
		syn := f.AETH.Syndrome()
		switch syn.Kind() {
		case bth.KindACK:
			q.ackThrough(psn)
		case bth.KindRNRNak:
			q.onRNRNak(psn, syn)
		case bth.KindNAK:
			q.onNak(psn, syn)
		default:
			return false
		}
	case op.IsReadResponse():
		return q.onReadResponse(f, op, psn)
	case op == bth.RCAtomicAck:
		return q.onAtomicAck(f, psn)
	default:
		return false
	}
	return true
}

// ackThrough acknowledges every packet up to and including psn.
func (q *QP) ackThrough(psn bth.PSN) {
	if psn.Less(q.compPSN) {
		return // old or duplicate ACK
	}
	progress := false
	for q.sqHead != q.sqTail {
		w := q.sqAt(q.sqHead)
		if !w.started {
			break
		}
		if w.wr.Opcode.isReadLike() {
			if psn.Diff(w.firstPSN) >= 0 {
				// The responder went past a READ or atomic whose
				// response we lack: implicit NAK.
				q.implicitNak()
			}
			break
		}
		if psn.Less(w.lastPSN) {
			q.compPSN = psn.Add(1)
			progress = true
			break
		}
		q.compPSN = w.lastPSN.Add(1)
		q.popSend(w, WCSuccess)
		progress = true
	}
	if progress {
		q.onProgress()
	}
}

// ackBefore completes the SENDs and WRITEs that end before psn, which a
// READ response, atomic ACK or NAK at psn implicitly acknowledges.
func (q *QP) ackBefore(psn bth.PSN) {
	progress := false
	for q.sqHead != q.sqTail {
		w := q.sqAt(q.sqHead)
		if !w.started || w.wr.Opcode.isReadLike() || !w.lastPSN.Less(psn) {
			break
		}
		q.compPSN = w.lastPSN.Add(1)
		q.popSend(w, WCSuccess)
		progress = true
	}
	if progress {
		q.onProgress()
	}
}

// popSend completes the request at the head of the send queue.
func (q *QP) popSend(w *sendWQE, st WCStatus) {
	if w.counted {
		w.counted = false
		q.rdOut--
	}
	q.sqHead++
	if int32(q.sqReq-q.sqHead) < 0 {
		q.sqReq = q.sqHead
		q.reqPSN = q.compPSN
		if q.sqReq != q.sqTail {
			if nw := q.sqAt(q.sqReq); nw.started {
				nw.sendPSN = nw.firstPSN
			}
		}
	}
	q.completeSend(w, st)
}

// onProgress runs when compPSN advanced: the retry budgets refill, the
// retransmission timer restarts, and a go-back-N that is behind catches up.
func (q *QP) onProgress() {
	q.retryLeft, q.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	q.rewound = false
	q.recovering = false
	q.widenWindow()
	if q.reqPSN.Less(q.compPSN) && q.sqReq != q.sqTail {
		w := q.sqAt(q.sqReq)
		if w.started && q.compPSN.Diff(w.lastPSN) <= 0 && !w.wr.Opcode.isAtomic() {
			w.sendPSN = q.compPSN
			q.reqPSN = q.compPSN
		}
	}
	q.onAck(q.e.now)
}

// implicitNak goes back to the oldest unacknowledged PSN once per gap;
// like a PSN sequence NAK it spends a retry (as rxe does).
func (q *QP) implicitNak() {
	if q.rewound {
		return
	}
	if !q.useRetry() {
		return
	}
	q.rewound = true
	q.cutWindow(q.compPSN)
	q.rewind(q.compPSN)
}

// onReadResponse places a READ response packet; false means it matched
// no outstanding READ (stale or stray).
func (q *QP) onReadResponse(f *bth.Frame, op bth.Opcode, psn bth.PSN) bool {
	q.ackBefore(psn)
	if q.sqHead == q.sqTail {
		return false
	}
	w := q.sqAt(q.sqHead)
	if w.started && w.wr.Opcode.isReadLike() && psn.Diff(w.lastPSN) > 0 {
		// A response past the oldest READ or atomic, whose own did not
		// come (all of it, or its rest): the responder answers in
		// order, so it was lost. An implied NAK (IBTA Vol. 1 §9.7): go
		// back to the oldest unacknowledged PSN now, not at the timeout.
		q.implicitNak()
		return true
	}
	if !w.started || w.wr.Opcode != WRRDMARead || psn.Diff(w.firstPSN) < 0 {
		return false
	}
	if psn != q.compPSN {
		if q.compPSN.Less(psn) {
			q.implicitNak()
		}
		return true
	}
	off := uint32(psn.Diff(w.firstPSN)) * q.mtu
	want := min(q.mtu, w.length-off)
	isLast := psn == w.lastPSN
	if uint32(len(f.Payload)) != want || isLast != op.IsLast() {
		q.popSend(w, WCBadRespErr)
		q.toError()
		return true
	}
	if !q.resolveSGL(w.wr.SGL, off, uint32(len(f.Payload)), AccessLocalWrite) {
		q.popSend(w, WCLocProtErr) // its memory was deregistered
		q.toError()
		return true
	}
	q.copyToSegs(f.Payload)
	q.compPSN = psn.Add(1)
	if isLast {
		q.popSend(w, WCSuccess)
	}
	q.onProgress()
	return true
}

func (q *QP) onAtomicAck(f *bth.Frame, psn bth.PSN) bool {
	q.ackBefore(psn)
	if q.sqHead == q.sqTail {
		return false
	}
	w := q.sqAt(q.sqHead)
	if !w.started || !w.wr.Opcode.isAtomic() || psn != w.firstPSN {
		if w.started && w.wr.Opcode.isReadLike() && w.firstPSN.Less(psn) {
			q.implicitNak()
			return true
		}
		return false
	}
	if !q.resolveSGL(w.wr.SGL, 0, 8, AccessLocalWrite) {
		q.popSend(w, WCLocProtErr)
		q.toError()
		return true
	}
	q.copyToSegs(binary.LittleEndian.AppendUint64(q.scratch[:0], f.AtomicAckETH.OrigRemoteData()))
	q.compPSN = psn.Add(1)
	q.popSend(w, WCSuccess)
	q.onProgress()
	return true
}

// onRNRNak: the responder had no receive buffer for the message at psn.
// Wait the RNR timer, then send again from psn, up to rnr_retry times.
func (q *QP) onRNRNak(psn bth.PSN, syn bth.Syndrome) {
	q.count(&q.e.stats.RNRNaksRx, &q.stats.RNRNaksRx)
	q.ackBefore(psn)
	if psn.Less(q.compPSN) || q.timer.rnrWait {
		return
	}
	if q.rnrLeft == 0 {
		q.failHead(WCRNRRetryExcErr)
		return
	}
	if q.rnrLeft != 7 {
		q.rnrLeft--
	}
	if !q.nakAdvance(psn) {
		return
	}
	q.rewind(psn)
	q.onRNRWait(q.e.now, syn.RNRTimer())
}

// onNak handles PSN sequence error and the fatal NAKs.
func (q *QP) onNak(psn bth.PSN, syn bth.Syndrome) {
	switch syn {
	case bth.NakPSNSeqError:
		q.count(&q.e.stats.SeqNaksRx, &q.stats.SeqNaksRx)
	case bth.NakInvalidRequest:
		q.count(&q.e.stats.InvReqNaksRx, &q.stats.InvReqNaksRx)
	case bth.NakRemoteAccessError:
		q.count(&q.e.stats.RemAccessNaksRx, &q.stats.RemAccessNaksRx)
	default:
		q.count(&q.e.stats.RemOpNaksRx, &q.stats.RemOpNaksRx)
	}
	q.ackBefore(psn)
	if psn.Less(q.compPSN) {
		return
	}
	switch syn {
	case bth.NakPSNSeqError:
		if !q.nakAdvance(psn) {
			return
		}
		if !q.useRetry() {
			return
		}
		q.cutWindow(psn)
		q.rewind(psn)
		q.rewound = true
	case bth.NakInvalidRequest:
		q.failHead(WCRemInvReqErr)
	case bth.NakRemoteAccessError:
		q.failHead(WCRemAccessErr)
	default:
		q.failHead(WCRemOpErr)
	}
}

// nakAdvance moves compPSN to a NAK's PSN, which acknowledges the packets
// before it. If a READ or atomic before psn still lacks its response, the
// response was lost: that is an implicit NAK, and it returns false.
func (q *QP) nakAdvance(psn bth.PSN) bool {
	if q.sqHead != q.sqTail {
		if w := q.sqAt(q.sqHead); w.started && w.wr.Opcode.isReadLike() && w.firstPSN.Less(psn) {
			q.implicitNak()
			return false
		}
	}
	if q.compPSN.Less(psn) {
		q.compPSN = psn
		q.onProgress()
	}
	return true
}

// useRetry spends one retry (7 = forever, as rxe); when none is left the
// oldest request fails with RETRY_EXC_ERR and it returns false.
func (q *QP) useRetry() bool {
	if q.retryLeft == 0 {
		q.failHead(WCRetryExcErr)
		return false
	}
	if q.retryLeft != 7 {
		q.retryLeft--
	}
	return true
}

// failHead completes the oldest request with st and moves the QP to ERR.
func (q *QP) failHead(st WCStatus) {
	if q.sqHead != q.sqTail {
		q.popSend(q.sqAt(q.sqHead), st)
	}
	q.toError()
}
