package qp

import "github.com/xroce/xroce/bth"

// The requester's window: how many PSNs an RC QP may have sent beyond the
// oldest unacknowledged one.
//
// Recovery is go-back-N (as rxe and ConnectX do): a lost packet costs
// every packet sent after it, which the responder discards as out of
// sequence. A wide window keeps the link busy while ACKs travel; a narrow
// one wastes little when packets are lost. So the window adapts, as a
// TCP sender's does: it starts at maxWindow, is halved (down to
// minWindow) when a loss is detected — a PSN sequence error NAK, an
// implied NAK (a READ or atomic response overtaken), or an ACK timeout —
// and grows by one PSN for every windowGrowth PSNs acknowledged, which
// gains an eighth of the window per round trip. Losses found in the same
// window cut it once: a cut is remembered with the PSN sent last, and a
// loss before that PSN is the same episode. A CNP halves it too, but not
// below congestedWindow: DCQCN paces a QP whose path is congested, and a
// window beyond that only lets its packets queue longer, at the expense of
// QPs that join later (internal/ccsim's TestJoinLeave measured a flow
// joining two others at 1.7 times their share for 30 ms without it).
//
// rxe's requester keeps a fixed window of 128 PSNs
// (RXE_MAX_UNACKED_PSNS). Responders bound only the RDMA READs and
// atomics outstanding (max_dest_rd_atomic), not SEND and WRITE packets;
// the engine's budget (budget.go) bounds what all its QPs have in flight
// together.

const (
	// maxWindow is the widest window, that of a QP that has seen no
	// loss: the engine's default budget (DefaultMaxInflight).
	maxWindow = 512
	// minWindow is the narrowest window after losses.
	minWindow = 16
	// windowGrowth is how many PSNs acknowledged widen the window by one.
	windowGrowth = 8
	// congestedWindow is the narrowest window a CNP leaves: rxe's fixed
	// one. It is at least twice ackReqEvery, so that a window narrowed
	// without going back (a CNP, unlike a loss) still has an AckReq among
	// the packets beyond it and never waits for the ACK timeout.
	congestedWindow = 128
)

// resetWindow gives q a full window (a QP entering RTS).
func (q *QP) resetWindow() {
	q.win, q.winAcked, q.winPSN, q.cutPSN = maxWindow, 0, q.compPSN, q.compPSN
}

// widenWindow counts the PSNs acknowledged since its last call towards
// the window's growth.
func (q *QP) widenWindow() {
	n := int(q.compPSN.Diff(q.winPSN))
	q.winPSN = q.compPSN
	if q.cutPSN.Less(q.compPSN) {
		q.cutPSN = q.compPSN // keep it within reach of PSN comparisons
	}
	if q.win >= maxWindow || n <= 0 {
		return
	}
	q.winAcked += n
	q.win = min(q.win+q.winAcked/windowGrowth, maxWindow)
	q.winAcked %= windowGrowth
}

// cutWindow halves the window for a loss found at psn, once per window:
// a loss at or before the PSN sent last at the previous cut is the same
// episode.
func (q *QP) cutWindow(psn bth.PSN) {
	if psn.Less(q.cutPSN) {
		return
	}
	q.cutPSN = q.sentPSN
	q.win = max(q.win/2, minWindow)
	q.winAcked = 0
	q.count(&q.e.stats.WindowCuts, &q.stats.WindowCuts)
}

// narrowWindow halves the window for a CNP, down to congestedWindow; a
// narrower window is left as it is.
func (q *QP) narrowWindow() {
	q.win = max(min(q.win, congestedWindow), q.win/2)
}
