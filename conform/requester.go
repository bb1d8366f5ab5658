package conform

import (
	"fmt"
	"time"

	"github.com/xroce/xroce/bth"
)

// The requester's rules, as IBTA Volume 1 release 1.4 places them (§9.7
// reliable service; section titles, no compliance statement numbers).
const (
	ruleReqTimeout  = "IBTA v1.4 §9.7 requester: local ACK timeout, resend from the oldest unacknowledged PSN"
	ruleReqSeqNak   = "IBTA v1.4 §9.7 requester: NAK PSN sequence error, resend from the PSN it names"
	ruleReqRNR      = "IBTA v1.4 §9.7 requester: RNR NAK, wait the timer it carries before resending"
	ruleReqAckPSN   = "IBTA v1.4 §9.7 requester: an ACK of no outstanding PSN is ignored"
	ruleReqCoalesce = "IBTA v1.4 §9.7 requester: an ACK acknowledges every earlier request (coalescing)"
	ruleReqImplied  = "IBTA v1.4 §9.7 requester: implied NAK (a response past an unanswered READ)"
	ruleReqReadSeq  = "IBTA v1.4 §9.7 requester: READ responses in PSN sequence"
	ruleReqRetry    = "IBTA v1.4 §9.7 requester: retry count exhausted, error"
	ruleReqCNP      = "IBTA v1.4 annex A17.9 reaction point: a CNP to the requester's QP lowers its injection rate"
)

// The CNPs of req.cnp: one every cnpCheckEvery for cnpCheckFor, after a
// baseline of cnpCheckBase. A DCQCN reaction point (ConnectX's, package
// qp's) allocates its limiter at the line rate on the first CNP, with α
// near 1, and cuts the rate by α/2 on each later one. α decays within a
// few hundred microseconds without CNPs, and 300 µs without a cut let the
// increase timer run fast recovery towards the rate before the cuts: only
// a steady stream of CNPs, tens of microseconds apart, holds the rate
// down. So the puppet asks for one every 20 µs (notification points send
// up to one per 4 µs per QP, ConnectX's min_time_between_cnps); a loop
// busy with the requester's traffic sends fewer, about 10,000 a second
// against xroce perf on a veth.
const (
	cnpCheckEvery = 20 * time.Microsecond
	cnpCheckFor   = time.Second
	cnpCheckBase  = 500 * time.Millisecond
	// cnpCheckMinReqs is the fewest requests a window must hold for its
	// rate to count.
	cnpCheckMinReqs = 20
)

// rnrCheckTimer is the RNR timer code req.rnr-timer sends: 20.48 ms, long
// against a wire's jitter, short against a check's patience.
const rnrCheckTimer = 22

// Requester are the checks of the peer as requester: the puppet serves.
var Requester = []Check{
	{
		Name:     "req.ack-timeout",
		Rule:     ruleReqTimeout,
		Sends:    "every answer withheld (ACKs, READ responses) until the requester sends a request again; then answers",
		Requires: "it resends from its oldest unacknowledged PSN once its local ACK timeout ran out: not before (the check allows half), nor far after (four times); then it goes on",
		Serve: []Phase{
			{Do: ActHold, Wait: 2 * time.Second, Timeouts: 10, Until: anyResent, Judge: judgeTimeout},
			goesOn(),
		},
	},
	{
		Name:     "req.seq-nak",
		Rule:     ruleReqSeqNak,
		Sends:    "NAK PSN sequence error for a request's PSN in place of its answer, as if it had been lost; every answer withheld until it comes again",
		Requires: "it resends from the NAKed PSN (not earlier: the NAK acknowledges what precedes), at once rather than at its ACK timeout; then it goes on",
		Serve: []Phase{
			{Do: ActSeqNak, Wait: 2 * time.Second, Timeouts: 6, Until: resentAfterMark, Judge: judgeSeqNak},
			goesOn(),
		},
	},
	{
		Name:      "req.rnr-timer",
		Rule:      ruleReqRNR,
		Sends:     "an RNR NAK with timer 20.48 ms in place of the ACK of a SEND, every answer withheld until it comes again",
		Requires:  "it sends that PSN again no sooner than the timer after the RNR NAK; then it goes on",
		PeerNeeds: PeerSendOnly,
		Serve: []Phase{
			{Do: ActRNR, RNRTimer: rnrCheckTimer, Wait: 2 * time.Second, Until: resentTarget, Judge: judgeRNR},
			goesOn(),
		},
	},
	{
		Name:      "req.ghost-ack",
		Rule:      ruleReqAckPSN,
		Sends:     "every answer withheld; in place of the first, an ACK repeating the last one it had and an ACK of a PSN it never sent",
		Requires:  "neither acknowledges anything: at its ACK timeout it resends from its oldest unacknowledged PSN, as if they never came; then it goes on",
		PeerNeeds: PeerAcked,
		Serve: []Phase{
			{Do: ActGhost, Wait: 2 * time.Second, Timeouts: 10, Until: resentAfterMark, Judge: judgeGhost},
			goesOn(),
		},
	},
	{
		Name:      "req.coalesced-ack",
		Rule:      ruleReqCoalesce,
		Sends:     "the ACKs of two requests withheld, the ACK of the third let through",
		Requires:  "that one ACK acknowledges all three: none of them is sent again",
		PeerNeeds: PeerAcked,
		Serve: []Phase{
			{Do: ActCoalesce, Count: 3, Wait: 2 * time.Second, After: 300 * time.Millisecond, AfterTimeouts: 3, Judge: judgeCoalesce},
			goesOn(),
		},
	},
	{
		Name:      "req.implied-nak",
		Rule:      ruleReqImplied,
		Sends:     "every response of one READ withheld while the next READ is answered",
		Requires:  "the later response implies a NAK: it asks for the unanswered READ again (same RETH) at once, not at its ACK timeout; then it goes on",
		PeerNeeds: PeerRead,
		Serve: []Phase{
			{Do: ActDropRead, Wait: 2 * time.Second, Timeouts: 10, Until: reissued, Judge: judgeReissue("the READ's responses withheld, the next READ's answered", 0)},
			goesOn(),
		},
	},
	{
		Name:      "req.read-gap",
		Rule:      ruleReqReadSeq,
		Sends:     "the second response packet of a READ of three packets or more withheld",
		Requires:  "the packet after the gap is out of sequence: it asks again from the missing PSN or the READ's first (the RETH moved to match) at once, not at its ACK timeout; then it goes on",
		PeerNeeds: PeerLongRead,
		Serve: []Phase{
			{Do: ActReadGap, Wait: 2 * time.Second, Timeouts: 10, Until: reissued, Judge: judgeReissue("a READ's second response packet withheld", 1)},
			goesOn(),
		},
	},
	{
		Name:      "req.retry-exhausted",
		Rule:      ruleReqRetry,
		Sends:     "every answer withheld for good",
		Requires:  "it resends its oldest unacknowledged PSN as many times as its retry count, then gives up (the QP goes to the error state and sends nothing more)",
		PeerNeeds: PeerRetry | PeerTimeout,
		Fatal:     true,
		Serve: []Phase{
			{Do: ActHold, Wait: 2 * time.Second, Timeouts: 24, Until: retriedBeyond, Judge: judgeRetry},
		},
		Known: []Deviation{{Code: "retry-7-forever", Impl: "rxe (Linux), xroce (package qp, as rxe)",
			Note: "retry_cnt 7 is taken as \"retry forever\", the meaning IBTA gives 7 only for the RNR retry count; perftest and ibv_rc_pingpong set 7"}},
	},
	{
		Name:     "req.cnp",
		Rule:     ruleReqCNP,
		Sends:    "every answer as usual for 0.5 s, then also a CNP to its QP every 20 µs for 1 s (nothing was marked CE)",
		Requires: "its rate of new request packets in the last half second of CNPs is below half its rate before them; a rate that does not fall means no reaction point (SKIP, as resp.cnp for a missing notification point); then it goes on",
		// SEND or WRITE traffic only: a READ requester's pace is the
		// responder's, and the puppet answering READs while it sends a
		// CNP every 20 µs slows it (rxe, which has no reaction point,
		// "passed" through ib_read_bw in the interop suite).
		PeerNeeds: PeerAcked,
		Serve: []Phase{
			{Do: ActPass, Wait: cnpCheckBase, Judge: judgeRateBefore},
			{Do: ActCNP, Every: cnpCheckEvery, Wait: cnpCheckFor, Judge: judgeCNPRate},
			goesOn(),
		},
	},
}

// reqRate returns the requester's new request packets per second in the
// phase from t to its end, and how many there were.
func reqRate(x *Ctx, t time.Duration) (float64, int) {
	n := 0
	for i := range x.Reqs {
		if r := &x.Reqs[i]; r.New && r.At >= t {
			n++
		}
	}
	d := x.End - t
	if d <= 0 {
		return 0, n
	}
	return float64(n) / d.Seconds(), n
}

// judgeRateBefore measures req.cnp's baseline: the whole phase's rate.
func judgeRateBefore(x *Ctx) Outcome {
	rate, n := reqRate(x, x.Start)
	if n < cnpCheckMinReqs {
		return Outcome{Skip: true, Obs: fmt.Sprintf("the requester sent %d new requests in %v: too few to measure its rate", n, (x.End - x.Start).Round(time.Millisecond))}
	}
	x.Vars["cnp.base"] = uint64(rate)
	return Outcome{OK: true}
}

// judgeCNPRate compares the rate in the last half of the CNPs with the
// baseline.
func judgeCNPRate(x *Ctx) Outcome {
	if !x.Marked {
		return Outcome{Skip: true, Obs: "no answer reached the requester to address a CNP with"}
	}
	base := float64(x.Vars["cnp.base"])
	rate, _ := reqRate(x, x.Start+(x.End-x.Start)/2)
	if rate < base/2 {
		return ok("%d CNPs in %v: its request rate fell from %.0f to %.0f packets/s", x.Vars["cnps"], (x.End - x.Start).Round(time.Millisecond), base, rate)
	}
	return Outcome{Skip: true, Obs: fmt.Sprintf("no reaction point seen: %d CNPs in %v, its request rate %.0f packets/s before and %.0f during, not below half",
		x.Vars["cnps"], (x.End - x.Start).Round(time.Millisecond), base, rate)}
}

// goesOn is the phase after a tampering one: answers pass, and the
// requester must carry on: a request it never sent before is answered.
func goesOn() Phase {
	return Phase{Do: ActPass, Wait: 2 * time.Second, Timeouts: 8, Until: progressed, Judge: func(x *Ctx) Outcome {
		if progressed(x) {
			return ok("then it goes on")
		}
		return fail("stuck", "then, answered again, it made no progress (%d requests, %d answers)", len(x.Reqs), len(x.Passed))
	}}
}

// progressed reports whether an answer to a request new in the phase
// reached the requester.
func progressed(x *Ctx) bool {
	for i := range x.Passed {
		a := &x.Passed[i]
		if (isAck(a) || a.Opcode().IsReadResponse() || a.Opcode() == bth.RCAtomicAck) && (!x.Seen || a.BTH.PSN().Diff(x.Next) >= 0) {
			return true
		}
	}
	return false
}

// resent returns the first request of the phase sent again at or after t.
func resent(x *Ctx, t time.Duration) *Req {
	for i := range x.Reqs {
		if r := &x.Reqs[i]; !r.New && r.At >= t {
			return r
		}
	}
	return nil
}

func anyResent(x *Ctx) bool { return resent(x, 0) != nil }

func resentAfterMark(x *Ctx) bool { return x.Marked && resent(x, x.Mark) != nil }

// resentTarget reports whether the act's request was sent again after the
// mark.
func resentTarget(x *Ctx) bool {
	if !x.Marked {
		return false
	}
	for i := range x.Reqs {
		if r := &x.Reqs[i]; !r.New && r.At >= x.Mark && r.BTH.PSN() == x.MarkPSN {
			return true
		}
	}
	return false
}

// newReqs counts the phase's new requests.
func newReqs(x *Ctx) int {
	n := 0
	for i := range x.Reqs {
		if x.Reqs[i].New {
			n++
		}
	}
	return n
}

// judgeTimeout judges req.ack-timeout's hold.
func judgeTimeout(x *Ctx) Outcome {
	if len(x.Reqs) == 0 && x.Acked == x.Next {
		return Outcome{Skip: true, Obs: "the requester sent nothing"}
	}
	r := resent(x, 0)
	if r == nil {
		return fail("no-resend", "every answer withheld: %d new requests, none sent again", newReqs(x))
	}
	if r.BTH.PSN() != x.Acked {
		return fail("resend-psn", "every answer withheld: it resent PSN %d first, want its oldest unacknowledged, %d", r.BTH.PSN(), x.Acked)
	}
	// The timer may start at the last answer it had, or at its first
	// request after that; it may be restarted by each request (rxe).
	base := x.LastAnswer
	if x.Acked == x.Next || !x.Seen {
		for i := range x.Reqs {
			if x.Reqs[i].New {
				base = max(base, x.Reqs[i].At)
				break
			}
		}
	}
	var lastNew time.Duration
	for i := range x.Reqs {
		if q := &x.Reqs[i]; q.New && q.At < r.At {
			lastNew = q.At
		}
	}
	d := r.At - base
	to := x.P.AckTimeout()
	switch {
	case to == 0:
		return ok("every answer withheld: resent from PSN %d after %v (its ACK timeout is not known)", r.BTH.PSN(), d.Round(time.Millisecond))
	case d < to/2:
		return fail("early", "every answer withheld: it resent PSN %d %v after its last answer, before its ACK timeout (%v)", r.BTH.PSN(), d.Round(time.Millisecond), to)
	case r.At-lastNew > 4*to+50*time.Millisecond:
		return fail("late", "every answer withheld: it resent PSN %d %v after its last new request, past four ACK timeouts (%v)", r.BTH.PSN(), (r.At - lastNew).Round(time.Millisecond), to)
	}
	return ok("every answer withheld: resent from its oldest unacknowledged PSN %d after %v (ACK timeout %v)", r.BTH.PSN(), d.Round(time.Millisecond), to)
}

// judgeSeqNak judges req.seq-nak.
func judgeSeqNak(x *Ctx) Outcome {
	if !x.Marked {
		return Outcome{Skip: true, Obs: "no request was answered"}
	}
	d := x.MarkPSN
	r := resent(x, x.Mark)
	if r == nil {
		return fail("no-resend", "NAK PSN sequence error for PSN %d: nothing sent again", d)
	}
	if r.BTH.PSN() != d {
		return fail("resend-psn", "NAK PSN sequence error for PSN %d: it resent from PSN %d, want %d", d, r.BTH.PSN(), d)
	}
	after := r.At - x.Mark
	if to := x.P.AckTimeout(); to > 0 && after >= to/2 {
		return fail("by-timeout", "NAK PSN sequence error for PSN %d: resent %v later, at its ACK timeout (%v), not on the NAK", d, after.Round(time.Millisecond), to)
	}
	return ok("NAK PSN sequence error for PSN %d: resent from it after %v", d, after.Round(10*time.Microsecond))
}

// judgeRNR judges req.rnr-timer.
func judgeRNR(x *Ctx) Outcome {
	if !x.Marked {
		return Outcome{Skip: true, Obs: "no single-packet SEND was acknowledged"}
	}
	t := bth.RNRTimerDuration(rnrCheckTimer)
	for i := range x.Reqs {
		r := &x.Reqs[i]
		if r.New || r.At < x.Mark || r.BTH.PSN() != x.MarkPSN {
			continue
		}
		d := r.At - x.Mark
		if d < t*95/100 {
			return fail("early", "RNR NAK for PSN %d with timer %v: sent again after %v, before the timer ran out", x.MarkPSN, t, d.Round(10*time.Microsecond))
		}
		return ok("RNR NAK for PSN %d with timer %v: sent again after %v", x.MarkPSN, t, d.Round(10*time.Microsecond))
	}
	return fail("no-retry", "RNR NAK for PSN %d with timer %v: not sent again", x.MarkPSN, t)
}

// judgeGhost judges req.ghost-ack.
func judgeGhost(x *Ctx) Outcome {
	if !x.Marked {
		return Outcome{Skip: true, Obs: "no ACK came to withhold"}
	}
	r := resent(x, x.Mark)
	if r == nil {
		return fail("ghost-taken", "an ACK of PSN %d, never sent, and a repeated ACK: none of its unacknowledged requests (from PSN %d) sent again, as if acknowledged", x.MarkPSN, x.Acked)
	}
	if r.BTH.PSN() != x.Acked {
		return fail("ghost-taken", "an ACK of PSN %d, never sent, and a repeated ACK: it resent from PSN %d, past its oldest unacknowledged %d", x.MarkPSN, r.BTH.PSN(), x.Acked)
	}
	d := r.At - x.Mark
	if to := x.P.AckTimeout(); to > 0 && d < to/2 {
		return fail("early", "an ACK of PSN %d, never sent, and a repeated ACK: it resent PSN %d %v later, before its ACK timeout (%v), as if NAKed", x.MarkPSN, r.BTH.PSN(), d.Round(time.Millisecond), to)
	}
	return ok("an ACK of PSN %d, never sent, and a repeated ACK changed nothing: resent from PSN %d after %v", x.MarkPSN, r.BTH.PSN(), d.Round(time.Millisecond))
}

// judgeCoalesce judges req.coalesced-ack.
func judgeCoalesce(x *Ctx) Outcome {
	if !x.Marked {
		if r := resent(x, 0); r != nil {
			return Outcome{Skip: true, Obs: "a withheld ACK timed out before the third came: the requester keeps fewer than 3 requests outstanding"}
		}
		return Outcome{Skip: true, Obs: "the requester sent fewer than 3 requests"}
	}
	for i := range x.Reqs {
		r := &x.Reqs[i]
		if !r.New && r.At >= x.Mark && r.BTH.PSN().LessEq(x.MarkPSN) {
			return fail("resent", "%d ACKs withheld, then an ACK of PSN %d for them all: it still resent PSN %d", len(x.Held), x.MarkPSN, r.BTH.PSN())
		}
	}
	return ok("%d ACKs withheld, then one ACK of PSN %d: nothing before it sent again", len(x.Held), x.MarkPSN)
}

// reissued reports whether the act's READ was asked for again after the
// mark.
func reissued(x *Ctx) bool {
	return x.Marked && x.Target != nil && reissue(x, readSpan(x.Target, x.P.MTU)-1) != nil
}

// reissue returns the first READ request after the mark that asks again
// for a PSN of the act's READ, from its first up to gap PSNs into it.
func reissue(x *Ctx, gap int) *Req {
	if x.Target == nil {
		return nil
	}
	first := x.Target.BTH.PSN()
	last := first.Add(uint32(gap))
	for i := range x.Reqs {
		r := &x.Reqs[i]
		if !r.New && r.At >= x.Mark && r.Opcode() == bth.RCReadRequest && r.BTH.PSN().Diff(first) >= 0 && r.BTH.PSN().Diff(last) <= 0 {
			return r
		}
	}
	return nil
}

// judgeReissue judges a READ whose responses were withheld from gap PSNs
// into it (what, in words): asked again at once, from a PSN of the READ
// up to the gap, its RETH moved by whole MTUs to match.
func judgeReissue(what string, gap int) func(x *Ctx) Outcome {
	return func(x *Ctx) Outcome {
		if x.Target == nil {
			return Outcome{Skip: true, Obs: "no READ of the kind needed was answered"}
		}
		first := x.Target.BTH.PSN()
		if !x.Marked {
			return Outcome{Skip: true, Obs: "nothing came after the gap to show it: the requester had one READ outstanding"}
		}
		r := reissue(x, readSpan(x.Target, x.P.MTU)-1)
		if r == nil {
			return fail("no-reissue", "%s (READ at PSN %d): not asked for again", what, first)
		}
		missing := first.Add(uint32(gap))
		psn := r.BTH.PSN()
		off := uint64(psn.Diff(first)) * uint64(x.P.MTU)
		o := x.Target.RETH
		switch {
		case psn.Diff(missing) > 0:
			return fail("reissue-psn", "%s (READ at PSN %d): asked again from PSN %d, past the missing %d", what, first, psn, missing)
		case r.RETH.RKey() != o.RKey() || r.RETH.VA() != o.VA()+off || uint64(r.RETH.DMALen())+off != uint64(o.DMALen()):
			return fail("reissue-reth", "%s (READ at PSN %d, VA %#x, %d B): asked again at PSN %d with VA %#x, %d B, R_Key %#x",
				what, first, o.VA(), o.DMALen(), psn, r.RETH.VA(), r.RETH.DMALen(), r.RETH.RKey())
		}
		d := r.At - x.Mark
		if to := x.P.AckTimeout(); to > 0 && d >= to/2 {
			return fail("by-timeout", "%s (READ at PSN %d): asked again %v later, at its ACK timeout (%v), not on the response past the gap", what, first, d.Round(time.Millisecond), to)
		}
		return ok("%s (READ at PSN %d): asked again from PSN %d after %v", what, first, psn, d.Round(10*time.Microsecond))
	}
}

// retries counts the phase's resends of its oldest unacknowledged PSN.
func retries(x *Ctx) int {
	n := 0
	for i := range x.Reqs {
		if r := &x.Reqs[i]; !r.New && r.BTH.PSN() == x.Acked {
			n++
		}
	}
	return n
}

// retriedBeyond ends req.retry-exhausted once the requester resent more
// than its retry count and one more: it will not stop.
func retriedBeyond(x *Ctx) bool { return retries(x) > int(x.P.RetryCnt)+1 }

// judgeRetry judges req.retry-exhausted.
func judgeRetry(x *Ctx) Outcome {
	if len(x.Reqs) == 0 && x.Acked == x.Next {
		return Outcome{Skip: true, Obs: "the requester sent nothing"}
	}
	n, want := retries(x), int(x.P.RetryCnt)
	switch {
	case n < want:
		return fail("too-few", "every answer withheld: PSN %d resent %d times, want %d (its retry count)", x.Acked, n, want)
	case n > want && want == 7:
		return fail("retry-7-forever", "every answer withheld: PSN %d resent %d times and on, past its retry count 7", x.Acked, n)
	case n > want:
		return fail("too-many", "every answer withheld: PSN %d resent %d times, past its retry count %d", x.Acked, n, want)
	}
	return ok("every answer withheld: PSN %d resent %d times (its retry count), then nothing", x.Acked, n)
}
