package qp

import "time"

// timers are a QP's requester timers: the local ACK timeout (retransmit
// from the oldest unacknowledged PSN) and the RNR wait.
type timers struct {
	retransArmed bool
	retransAt    time.Duration
	rnrWait      bool
	rnrUntil     time.Duration
}

func (t *timers) stop() { t.retransArmed = false }

// ackTimeout returns the local ACK timeout, 4.096 µs × 2^Timeout, or 0 for
// none.
func (q *QP) ackTimeout() time.Duration {
	if q.attr.Timeout == 0 {
		return 0
	}
	return 4096 * time.Nanosecond << q.attr.Timeout
}

// outstanding reports whether packets sent in the current pass wait for
// acknowledgement. After a go-back-N nothing is outstanding until the
// packets go again: the timer must not run while the QP waits for its
// turn to send them (budget.go), or the wait would spend its retries.
func (q *QP) outstanding() bool { return q.reqPSN.Diff(q.compPSN) > 0 }

// onRequestSent arms the retransmission timer if it is not running.
func (q *QP) onRequestSent(now time.Duration) {
	if !q.timer.retransArmed {
		if to := q.ackTimeout(); to != 0 {
			q.timer.retransArmed = true
			q.timer.retransAt = now + to
		}
	}
}

// onAck restarts the retransmission timer after progress, or stops it when
// nothing is outstanding.
func (q *QP) onAck(now time.Duration) {
	q.timer.retransArmed = false
	if q.outstanding() {
		q.onRequestSent(now)
	}
}

// onRNRWait pauses the requester for the RNR timer the responder asked for.
func (q *QP) onRNRWait(now, d time.Duration) {
	q.timer.retransArmed = false
	q.timer.rnrWait = true
	q.timer.rnrUntil = now + d
}

// runTimers fires the timers due by now.
func (q *QP) runTimers(now time.Duration) {
	t := &q.timer
	if t.rnrWait && now >= t.rnrUntil {
		t.rnrWait = false
	}
	if t.retransArmed && now >= t.retransAt {
		t.retransArmed = false
		if q.state != StateRTS && q.state != StateSQD || !q.outstanding() {
			return
		}
		q.count(&q.e.stats.Timeouts, &q.stats.Timeouts)
		if !q.useRetry() {
			return
		}
		q.cutWindow(q.compPSN)
		q.rewind(q.compPSN)
		q.rewound = true
		q.recovering = true
		q.onRequestSent(now)
	}
}

// next returns the QP's earliest deadline.
func (t *timers) next(q *QP) time.Duration {
	d := Never
	if t.retransArmed {
		d = t.retransAt
	}
	if t.rnrWait && t.rnrUntil < d {
		d = t.rnrUntil
	}
	return d
}
