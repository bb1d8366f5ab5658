package qp

import (
	"net/netip"
	"slices"
	"time"
)

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
//
// A slow peer is not dead: one that acknowledges just often enough never
// to time out (every 40 ms, say) keeps the packets its QPs sent in flight
// until it does, and its QPs, their windows open, spend whatever budget
// the others free; the QPs of the other peers, whose packets come back in
// microseconds, fall to almost nothing while the CPU idles (issue 28). So
// the budget is shared between peers (remote IP addresses) before it is
// shared between QPs: while more than one peer has packets in flight or
// QPs stopped, no peer may have more than an equal share of the budget
// (maxInflight over the number of such peers). A QP whose peer has its
// share stops in the peer's own line, not the engine's, and goes back to
// the engine's line when the peer's packets are acknowledged or the share
// grows. A peer's share is what the peer itself acknowledges: a slow one
// holds it for as long as it waits, the others go on at the rate their
// own ACKs allow. With one peer the rule is the one above.

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
	d := c - q.charged
	if d == 0 {
		return
	}
	e := q.e
	e.inflight += d
	q.charged = c
	p := q.peer
	if p == nil {
		p = q.attachPeer()
	}
	p.inflight += d
	e.notePeer(p)
}

// peer is the budget's account of one remote address: the RC QPs that
// send to it, the packets they have in flight, and the QPs stopped
// because it had its share (budget.go).
type peer struct {
	addr     netip.Addr
	qps      int
	inflight int
	wait     []*QP
	active   bool // counted in Engine.activePeers: packets in flight or QPs stopped
	stopped  bool // in Engine.stopped: QPs wait
}

// attachPeer returns q's peer account, made on first use: one per remote
// address, gone with its last QP, so there are never more than QPs.
func (q *QP) attachPeer() *peer {
	e := q.e
	a := q.attr.AV.DstIP.Unmap()
	p := e.peers[a]
	if p == nil {
		p = &peer{addr: a}
		e.peers[a] = p
	}
	p.qps++
	q.peer = p
	return p
}

// detachPeer takes q and what it holds out of its peer's account (the QP
// is destroyed, or its address vector changed).
func (q *QP) detachPeer() {
	p := q.peer
	if p == nil {
		return
	}
	e := q.e
	p.inflight -= q.charged
	e.inflight -= q.charged
	q.charged = 0
	if q.inPeerLine {
		q.inPeerLine = false
		if i := slices.Index(p.wait, q); i >= 0 {
			p.wait = slices.Delete(p.wait, i, i+1)
		}
	}
	q.peer = nil
	p.qps--
	e.notePeer(p)
	if p.qps == 0 && !p.active {
		delete(e.peers, p.addr)
	}
}

// notePeer brings the engine's count of active peers (and so the share)
// up to date with p, and lets p's stopped QPs go when p is under its
// share again.
func (e *Engine) notePeer(p *peer) {
	if len(p.wait) > 0 && p.inflight < e.share {
		e.releasePeer(p)
	}
	active := p.inflight > 0 || len(p.wait) > 0
	if active == p.active {
		return
	}
	p.active = active
	if active {
		e.activePeers++
	} else {
		e.activePeers--
	}
	e.share = max(e.maxInflight/max(e.activePeers, 1), 1)
	if !active {
		// The others' share grew.
		for _, o := range e.stopped {
			o.stopped = false
			e.releasePeer(o)
		}
		clear(e.stopped)
		e.stopped = e.stopped[:0]
	}
}

// releasePeer sends p's stopped QPs to the end of the engine's line, in
// the order they stopped.
func (e *Engine) releasePeer(p *peer) {
	for i, q := range p.wait {
		p.wait[i] = nil
		q.inPeerLine = false
		q.waitInLine()
	}
	p.wait = p.wait[:0]
}

// overShare reports whether q's peer has its share of the budget while
// other peers want theirs.
func (q *QP) overShare(extra int) bool {
	p := q.peer
	return p != nil && q.e.activePeers > 1 && p.inflight+extra >= q.e.share
}

// waitForPeer stops q in its peer's line until the peer is under its
// share.
func (q *QP) waitForPeer() {
	p := q.peer
	if q.inPeerLine || q.destroyed {
		return
	}
	q.inPeerLine = true
	p.wait = append(p.wait, q)
	if !p.stopped {
		p.stopped = true
		q.e.stopped = append(q.e.stopped, p)
	}
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
	if q.overShare(0) {
		q.waitForPeer()
		return false
	}
	// A QP in recovery sends its one packet without waiting in line.
	if !q.turn && !q.recovering && len(e.line) > e.lineHead || e.inflight >= e.maxInflight || q.turn && q.turnSent >= turnPackets {
		q.waitInLine()
		return false
	}
	// A window of 64 or more has asked for an ACK at least 64 packets
	// before its end; a smaller one must ask on its last packet.
	q.ackNow = win < ackReqEvery && out+1 >= win || e.inflight+1 >= e.maxInflight || q.turn && q.turnSent+1 >= turnPackets ||
		q.overShare(1)
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
