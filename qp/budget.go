package qp

import "time"

// The engine's transmit budget: how many request packets its RC QPs
// together may have in the network, and the line in which they wait for
// it.
//
// Each RC QP may have up to its window unacknowledged (window.go; 128
// PSNs then, as rxe), which is right for one QP and wrong for many: 256 QPs of a perftest run
// put 32,768 packets in flight at once, far beyond the rings between two
// software hosts (an AF_XDP RX ring holds 2048 frames, a veth queue 256).
// The rings overflowed at both ends, the data at the responder and the
// ACKs at the requester, whose only worker was busy transmitting; a
// window's tail lost without a later packet to reveal the gap is found by
// the local ACK timeout alone (67 ms by default); every timed-out QP went
// back N and sent its whole window again, and the duplicates filled the
// rings once more. xroce perf write_bw -q 256 between two namespaces
// received 2.7 M duplicates among 4.1 M frames and completed nothing for
// 20 s (issue 20).
//
// So the engine bounds the sum (EngineConfig.MaxInflight), which a
// hardware RNIC gets from its line rate and a lossless fabric. A QP
// counts the PSNs it has sent in the current pass and that wait for
// acknowledgement (reqPSN − compPSN: after a go-back-N the packets beyond
// the restart point have left the network, dropped or discarded by the
// responder). When the budget is spent, or others already wait, a QP
// with packets to send joins the engine's line, first in, first out; Poll
// serves the line as ACKs free the budget, turnPackets packets a turn, so
// every QP progresses at its share whatever the number of QPs. The last
// packet a QP sends before it stops asks for an ACK, so that the budget it
// holds comes back without a timeout.
//
// A QP whose ACK timer expired sends one packet at a time (recovery)
// until something is acknowledged: a dead peer holds one packet of the
// budget, not a window, however many QPs it had.

// DefaultMaxInflight is the default EngineConfig.MaxInflight: a quarter of
// the receive ring of an xroce peer (xdp.Config.RingSize 2048), so that
// the budgets of up to four workers sending to one queue fit in it, with
// room for ACKs and other traffic. On veth 256, 512 and 1024 gave the same
// goodput with 256 QPs (xroce perf qps), and one QP's 128 fits in any.
const DefaultMaxInflight = 512

// turnPackets is the most packets a QP sends in one turn when QPs wait in
// line for the budget.
const turnPackets = 16

// recoveryWindow is the window of a QP whose ACK timer expired, until
// progress.
const recoveryWindow = 1

// window is the most PSNs q may have unacknowledged now.
func (q *QP) window() int {
	if q.recovering {
		return recoveryWindow
	}
	return q.win
}

// recharge brings the engine's count of packets in flight up to date with
// q's: the PSNs q sent in its current pass that wait for acknowledgement,
// while it is an RC QP that sends (RTS, SQD).
func (q *QP) recharge() {
	c := 0
	if q.typ == RC && (q.state == StateRTS || q.state == StateSQD) && !q.destroyed {
		c = max(int(q.reqPSN.Diff(q.compPSN)), 0)
	}
	q.e.inflight += c - q.charged
	q.charged = c
}

// mayStart reports whether q may send its next request packet as far as
// its window and the engine's budget go; if the budget stops it, q waits
// in line. It also decides whether that packet is the last of the turn,
// which then asks for an ACK (q.ackNow).
func (q *QP) mayStart() bool {
	if q.typ != RC {
		return true
	}
	e := q.e
	out := int(q.reqPSN.Diff(q.compPSN))
	win := q.window()
	if out >= win {
		return false
	}
	// A QP in recovery sends its one packet without waiting in line.
	if !q.turn && !q.recovering && len(e.line) > e.lineHead || e.inflight >= e.maxInflight || q.turn && q.turnSent >= turnPackets {
		q.waitInLine()
		return false
	}
	// A window of 64 or more has asked for an ACK at least 64 packets
	// before its end; a smaller one must ask on its last packet.
	q.ackNow = win < ackReqEvery && out+1 >= win || e.inflight+1 >= e.maxInflight || q.turn && q.turnSent+1 >= turnPackets
	return true
}

// waitInLine puts q at the end of the engine's line for the budget.
func (q *QP) waitInLine() {
	if q.inLine || q.destroyed {
		return
	}
	q.inLine = true
	q.e.line = append(q.e.line, q)
}

// serveLine gives turns to the QPs waiting for the budget, in order, while
// there is budget. A QP whose turn ends with packets left joins the end of
// the line again.
func (e *Engine) serveLine(now time.Duration) bool {
	busy := false
	for e.lineHead < len(e.line) && e.inflight < e.maxInflight {
		q := e.line[e.lineHead]
		e.line[e.lineHead] = nil
		e.lineHead++
		q.inLine = false
		if q.destroyed {
			continue
		}
		q.turn, q.turnSent = true, 0
		e.visits++
		d := q.poll(now)
		q.turn = false
		if q.blocked {
			busy = true
			q.wake()
			continue
		}
		q.schedule(d)
	}
	if e.lineHead == len(e.line) {
		e.line, e.lineHead = e.line[:0], 0
	} else if e.lineHead > 64 && e.lineHead > len(e.line)/2 {
		n := copy(e.line, e.line[e.lineHead:])
		clear(e.line[n:])
		e.line, e.lineHead = e.line[:n], 0
	}
	return busy
}

// Inflight returns the request packets the engine's RC QPs have in the
// network (see EngineConfig.MaxInflight) and how many QPs wait for that
// budget.
func (e *Engine) Inflight() (packets, waiting int) {
	return e.inflight, len(e.line) - e.lineHead
}
