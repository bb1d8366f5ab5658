package qp

import (
	"fmt"
	"time"
)

// The pacer: a QP whose rate is limited, by DCQCN (dcqcn.go) or by its
// static limit (Config.RateLimit), spaces the data packets it sends
// (requests and READ responses; not ACKs or CNPs) at that rate, as an RNIC
// spaces them by size/rate. It is a token bucket counted in bytes on the
// wire (frame plus 24 bytes of preamble, FCS and inter-frame gap): the
// bucket fills at the rate up to the burst; a packet may go while the
// bucket holds anything, and takes its bytes out (the bucket may go
// negative by that packet). A QP that the engine polls late thus sends
// what the burst allows at once and then keeps the rate. Counting bytes
// rather than times keeps a deficit right when DCQCN changes the rate:
// the wait for it is recomputed at the new rate.
//
// The pacer needs no timer of its own: a QP that must wait stops sending
// and its Poll deadline becomes the time the bucket holds a byte again,
// through the engine's timer heap like any other deadline.

// wireOverhead is what Ethernet adds to a frame on the wire: preamble and
// start delimiter (8), FCS (4) and the inter-frame gap (12).
const wireOverhead = 24

// DefaultPaceBurst is the default burst tolerance of the pacer, in bytes
// (EngineConfig.PaceBurst): enough to ride out a worker that wakes tens of
// microseconds late at tens of Gb/s.
const DefaultPaceBurst = 64 << 10

// maxPaceBurst bounds a burst, so that its time at any rate fits an
// int64 of nanoseconds.
const maxPaceBurst = 1 << 30

// wireTime returns the time n bytes take at rate bits/s.
func wireTime(n, rate int64) time.Duration {
	return time.Duration(n * 8 * int64(time.Second) / rate)
}

// paceRate brings q's DCQCN up to date and returns the rate q sends at
// now, in bits/s: the lower of DCQCN's and the static limit, 0 when
// neither limits it.
func (q *QP) paceRate(now time.Duration) int64 {
	r := q.rateLimit
	if q.rp.Limited() {
		cuts := q.rp.Cuts()
		q.rp.Update(now)
		q.noteRate(cuts)
		if d := q.rp.Rate(); d > 0 && (r == 0 || d < r) {
			r = d
		}
	}
	return r
}

// noteRate publishes q's rate (and the lowest it has had) in its stats
// and counts the cuts DCQCN made since it had made cuts.
func (q *QP) noteRate(cuts uint64) {
	if n := q.rp.Cuts() - cuts; n > 0 {
		q.e.stats.RateCuts.Add(n)
		q.stats.RateCuts.Add(n)
	}
	r := q.rp.Rate()
	if q.rateLimit > 0 && (r == 0 || q.rateLimit < r) {
		r = q.rateLimit
	}
	q.stats.Rate.Store(uint64(r))
	if l := q.stats.RateLowest.Load(); r > 0 && (l == 0 || uint64(r) < l) {
		q.stats.RateLowest.Store(uint64(r))
	}
}

// paced reports whether q must wait before its next data packet, and then
// keeps the time it may go in q.paceAt for Poll's deadline.
func (q *QP) paced(now time.Duration) bool {
	r := q.paceRate(now)
	if r == 0 {
		q.credit, q.creditAt = int64(q.paceBurst()), now
		return false
	}
	q.refill(now, r)
	if q.credit > 0 {
		return false
	}
	q.paceAt = min(q.paceAt, now+wireTime(1-q.credit, r)+1, q.rp.Next())
	return true
}

// paceBurst returns the size of q's bucket in bytes.
func (q *QP) paceBurst() int {
	if q.burst != 0 {
		return q.burst
	}
	return q.e.cc.burst
}

// refill fills q's bucket for the time since it was last filled, at rate
// r, up to the burst.
func (q *QP) refill(now time.Duration, r int64) {
	burst := int64(q.paceBurst())
	dt := now - q.creditAt
	q.creditAt = now
	if dt <= 0 || q.credit >= burst {
		q.credit = min(q.credit, burst)
		return
	}
	// The time to fill the bucket bounds dt, so that dt·r cannot
	// overflow (burst ≤ maxPaceBurst).
	if full := wireTime(burst-q.credit, r); dt >= full {
		q.credit = burst
		return
	}
	q.credit = min(q.credit+int64(dt)*r/(8*int64(time.Second)), burst)
}

// onDataSent charges a data frame of n bytes sent at now to q's pacer and
// to DCQCN's byte counter.
func (q *QP) onDataSent(n int, now time.Duration) {
	if q.rp.Limited() {
		cuts := q.rp.Cuts()
		q.rp.OnSent(n, now)
		q.noteRate(cuts)
	}
	if r := q.paceRate(now); r != 0 {
		q.refill(now, r)
		q.credit -= int64(n + wireOverhead)
	}
}

// SetRateLimit sets q's static maximum rate in bits/s of Ethernet frames on
// the wire (0 removes it), and the burst its pacer lets go at once in bytes
// (0 means EngineConfig.PaceBurst). DCQCN may hold q below the limit,
// never above.
func (q *QP) SetRateLimit(rate int64, burst int) error {
	if rate < 0 || burst < 0 || burst > maxPaceBurst {
		return fmt.Errorf("qp %#x: rate limit %d b/s, burst %d bytes: %w", q.qpn, rate, burst, ErrInvalidAttr)
	}
	q.rateLimit, q.burst = rate, burst
	q.noteRate(q.rp.Cuts())
	q.wake() // a lower limit may let it send sooner
	return nil
}

// RateLimit returns q's static maximum rate in bits/s (0 for none).
func (q *QP) RateLimit() int64 { return q.rateLimit }

// DCQCN returns q's reaction point, for inspection: its rate, target and
// α as of q's latest packet or CNP.
func (q *QP) DCQCN() *DCQCN { return &q.rp }
