package conform

import (
	"fmt"
	"time"

	"github.com/xroce/xroce/bth"
)

// Requester checks turn the roles round: the peer is the requester. Its
// tool runs as a client against the puppet's server; package qp's
// responder, which follows the rules, answers it (Server), and a
// ServeTrial sits between the two on the QP under test. In each Phase the
// trial withholds, replaces or adds answers as the phase's Act says, and
// records what the requester does about it for the phase's judge.

// Traffic is what the requester under test sends: its tool's verb.
type Traffic uint8

// Traffics.
const (
	TrafficWrite Traffic = iota + 1
	TrafficSend
	TrafficRead
	TrafficAtomic
)

var trafficNames = [...]string{"", "WRITE", "SEND", "READ", "atomic"}

func (t Traffic) String() string {
	if int(t) < len(trafficNames) && trafficNames[t] != "" {
		return trafficNames[t]
	}
	return fmt.Sprintf("Traffic(%d)", t)
}

// Peer is the requester under test, as its tool's exchange and defaults
// describe it.
type Peer struct {
	QPN     uint32  // its QP number
	PSN     bth.PSN // the first PSN it sends
	MTU     int     // path MTU in bytes
	Traffic Traffic // what its requests are
	Size    int     // its message size in bytes
	// Timeout is its local ACK timeout code: 4.096 µs × 2^Timeout (0:
	// unknown). RetryCnt is its retry count, when RetryKnown.
	Timeout    uint8
	RetryCnt   uint8
	RetryKnown bool
}

// AckTimeout returns the peer's local ACK timeout, 0 if unknown.
func (p *Peer) AckTimeout() time.Duration {
	if p.Timeout == 0 {
		return 0
	}
	return 4096 * time.Nanosecond << p.Timeout
}

// PeerNeed is what a requester check needs of the requester under test.
type PeerNeed uint8

// Peer needs.
const (
	PeerAcked    PeerNeed = 1 << iota // requests answered by ACKs: SEND or WRITE traffic
	PeerSendOnly                      // single-packet SENDs (an RNR NAK names one)
	PeerRead                          // READ traffic
	PeerLongRead                      // READs of at least 3 path MTUs (a response with a middle)
	PeerTimeout                       // its ACK timeout is known
	PeerRetry                         // its retry count is known
)

var peerNeedNames = []flagName[PeerNeed]{
	{PeerAcked, "its requests are not SENDs or WRITEs"}, {PeerSendOnly, "it sends no single-packet SENDs"},
	{PeerRead, "it sends no READs"}, {PeerLongRead, "its READs are shorter than 3 path MTUs"},
	{PeerTimeout, "its ACK timeout is unknown"}, {PeerRetry, "its retry count is unknown"},
}

// Has reports whether p meets n.
func (p *Peer) Has(n PeerNeed) bool { return p.lacks(n) == 0 }

// lacks returns the needs of n that p does not meet.
func (p *Peer) lacks(n PeerNeed) PeerNeed {
	var l PeerNeed
	for _, x := range peerNeedNames {
		if n&x.n == 0 {
			continue
		}
		var m bool
		switch x.n {
		case PeerAcked:
			m = p.Traffic == TrafficWrite || p.Traffic == TrafficSend
		case PeerSendOnly:
			m = p.Traffic == TrafficSend && p.Size <= p.MTU
		case PeerRead:
			m = p.Traffic == TrafficRead
		case PeerLongRead:
			m = p.Traffic == TrafficRead && p.Size >= 3*p.MTU
		case PeerTimeout:
			m = p.Timeout != 0
		case PeerRetry:
			m = p.RetryKnown
		}
		if !m {
			l |= x.n
		}
	}
	return l
}

// Act is what the puppet's side does to the traffic of the QP under test
// during a phase.
type Act uint8

// Acts. "Answers" are what the responder sends the requester: ACKs, NAKs,
// READ responses, atomic ACKs.
const (
	// ActPass lets everything through.
	ActPass Act = iota
	// ActHold withholds every answer.
	ActHold
	// ActSeqNak replaces the first answer to a new request of the phase
	// (its ACK, its READ response's first packet, its atomic ACK) by NAK
	// PSN sequence error for that PSN, as if the request had been lost,
	// and withholds every answer after it until the requester sends that
	// PSN again. Marked when the NAK goes out.
	ActSeqNak
	// ActRNR replaces the ACK of the phase's first single-packet SEND by
	// an RNR NAK for its PSN with timer code Phase.RNRTimer, and withholds
	// every answer after it until the requester sends that PSN again.
	// Marked when the RNR NAK goes out.
	ActRNR
	// ActCoalesce withholds the first Phase.Count−1 ACKs of the phase's
	// new requests and lets the next one through: one ACK for them all.
	// Marked when it goes out.
	ActCoalesce
	// ActDropRead withholds every response of the phase's first new READ
	// until the requester asks for it again; later READs are answered.
	// Marked when the first response past the withheld ones goes out.
	ActDropRead
	// ActReadGap withholds the second response packet of the phase's
	// first new READ of three packets or more, until the requester asks
	// again. Marked when the packet after the gap goes out.
	ActReadGap
	// ActGhost withholds every answer, as ActHold, and in place of the
	// first withheld ACK sends two that acknowledge nothing outstanding:
	// one repeating the last ACK the requester had (a duplicate), one for
	// a PSN it never sent (a ghost). Marked when they go out; MarkPSN is
	// the ghost's.
	ActGhost
	// ActCNP lets every answer through and sends the requester's QP a
	// CNP (IBTA annex A17.9: BTH opcode 0x81, BECN set, P_Key 0xFFFF, 16
	// reserved zero bytes) every Phase.Every, from the phase's first
	// answer on: the notification a congested path would draw, though
	// nothing was marked. Marked when the first CNP goes out.
	ActCNP
)

// Phase is a stretch of a requester check: what is done to the traffic
// (Act), how long it lasts, and the judge of what the requester did.
type Phase struct {
	Do       Act
	Count    int           // ActCoalesce: the ACKs the one that goes through stands for
	RNRTimer uint8         // ActRNR: the timer code of the RNR NAK
	Every    time.Duration // ActCNP: the interval between CNPs
	// Wait bounds the phase (0: DefaultServeWait); Timeouts, when set,
	// raises it to that many of the peer's ACK timeouts. Until ends the
	// phase as soon as it reports true; After, once the act is marked,
	// ends it that long after the mark (AfterTimeouts raises it to that
	// many ACK timeouts).
	Wait          time.Duration
	Timeouts      int
	Until         func(x *Ctx) bool
	After         time.Duration
	AfterTimeouts int
	Judge         func(x *Ctx) Outcome
}

// DefaultServeWait bounds a phase that does not say.
const DefaultServeWait = time.Second

// wait returns how long ph may last against p.
func (ph *Phase) wait(p *Peer) time.Duration {
	w := ph.Wait
	if w == 0 {
		w = DefaultServeWait
	}
	if to := p.AckTimeout(); ph.Timeouts > 0 && to > 0 {
		w = max(w, time.Duration(ph.Timeouts)*to)
	}
	return w
}

// after returns how long ph lasts past its mark against p (0: no bound).
func (ph *Phase) after(p *Peer) time.Duration {
	a := ph.After
	if to := p.AckTimeout(); a > 0 && ph.AfterTimeouts > 0 && to > 0 {
		a = max(a, time.Duration(ph.AfterTimeouts)*to)
	}
	return a
}

// Req is a request from the peer, as a requester check's judge sees it.
type Req struct {
	Answer
	// New: a PSN never seen before (else a retransmission).
	New bool
}

// flow is what the puppet knows of one peer QP's traffic: the next PSN
// the requester has not sent yet, and its oldest unacknowledged PSN as
// the answers that reached it say. The Server keeps one per QP, with or
// without a trial.
type flow struct {
	mtu   int
	seen  bool          // a request came
	next  bth.PSN       // one past the highest PSN sent
	acked bth.PSN       // one past the last PSN acknowledged to the requester
	tmpl  []byte        // the last ACK that reached the requester
	last  time.Duration // when the last answer reached it
}

// request notes a request and reports whether its PSN is new.
func (fl *flow) request(f *bth.Frame) bool {
	psn := f.BTH.PSN()
	span := uint32(1)
	if f.Opcode() == bth.RCReadRequest && fl.mtu > 0 {
		span = max((f.RETH.DMALen()+uint32(fl.mtu)-1)/uint32(fl.mtu), 1)
	}
	if !fl.seen {
		fl.seen, fl.next, fl.acked = true, psn.Add(span), psn
		return true
	}
	if psn.Diff(fl.next) < 0 {
		return false
	}
	fl.next = psn.Add(span)
	return true
}

// answered notes an answer that reached the requester at now.
func (fl *flow) answered(f *bth.Frame, raw []byte, now time.Duration) {
	fl.last = now
	psn := f.BTH.PSN()
	to := psn.Add(1) // the first PSN it leaves unacknowledged
	if f.Opcode() == bth.RCAck {
		syn := f.AETH.Syndrome()
		switch {
		case syn.IsACK():
			fl.tmpl = append(fl.tmpl[:0], raw...)
		case syn == bth.NakPSNSeqError || syn.IsRNRNak():
			to = psn
		default:
			return
		}
	}
	if fl.seen && fl.acked.Less(to) && to.LessEq(fl.next) {
		fl.acked = to
	}
}

// ackFrom builds an ACKNOWLEDGE like tmpl (an answer to the requester)
// with PSN psn and syndrome syn; its MSN is tmpl's.
func ackFrom(tmpl []byte, psn bth.PSN, syn bth.Syndrome) []byte {
	var f bth.Frame
	if f.Decode(tmpl) != nil || f.AETH == nil {
		return nil
	}
	var ff bth.FrameFields
	f.Fields(&ff)
	ff.BTH.Opcode, ff.BTH.PSN = bth.RCAck, psn
	ff.AETH.Syndrome = syn
	buf := make([]byte, ff.FrameLen(0))
	n, err := bth.Build(buf, &ff, nil)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// ServeTrial runs one requester check on one QP of the puppet's server:
// a pure state machine. FromPeer and ToPeer see every frame between the
// requester under test and the responder, and may withhold or replace
// them; Poll moves the check from phase to phase. It belongs to one
// goroutine.
type ServeTrial struct {
	record
	p     *Peer
	fl    *flow
	phase int
	in    bool // a phase is running
	until time.Duration
	x     Ctx
	st    actState
}

// actState is the running phase's act, under way.
type actState struct {
	target, targetLast bth.PSN // the request the act is about
	targetSet          bool
	released           bool          // the requester asked for it again
	count              int           // ActCoalesce: ACKs seen
	cnpAt              time.Duration // ActCNP: when the next CNP is due (0: none sent yet)
}

// NewServeTrial prepares requester check c against p, whose traffic so
// far fl describes (nil: none yet).
func NewServeTrial(c *Check, p *Peer, fl *flow) *ServeTrial {
	if fl == nil {
		fl = &flow{mtu: p.MTU}
	}
	tr := &ServeTrial{record: newRecord(c), p: p, fl: fl}
	tr.x = Ctx{P: p, Vars: map[string]uint64{}, Read: map[string][]byte{}}
	if l := p.lacks(c.PeerNeeds); l != 0 {
		tr.finish(Skip, "the requester under test cannot show it: "+flagsText(l, peerNeedNames), "")
	}
	return tr
}

// Poll advances the trial at now and returns when to call it again at the
// latest.
func (tr *ServeTrial) Poll(now time.Duration) time.Duration {
	tr.begin(now)
	for !tr.done {
		if tr.in {
			ph := &tr.c.Serve[tr.phase]
			end := tr.until
			if a := ph.after(tr.p); a > 0 && tr.x.Marked {
				end = min(end, tr.x.Mark+a)
			}
			if now < end && (ph.Until == nil || !ph.Until(&tr.x)) {
				if ph.Do == ActCNP && tr.st.cnpAt > 0 {
					return min(end, tr.st.cnpAt)
				}
				return end
			}
			tr.x.End = now
			tr.judge(ph)
			continue
		}
		if tr.phase >= len(tr.c.Serve) {
			tr.passed()
			break
		}
		ph := &tr.c.Serve[tr.phase]
		tr.x.Reqs, tr.x.Passed, tr.x.Held = nil, nil, nil
		tr.x.Marked, tr.x.Mark, tr.x.MarkPSN, tr.x.Target = false, 0, 0, nil
		tr.x.Start, tr.x.Next, tr.x.Acked, tr.x.Seen, tr.x.LastAnswer = now, tr.fl.next, tr.fl.acked, tr.fl.seen, tr.fl.last
		tr.st = actState{}
		tr.in, tr.until = true, now+ph.wait(tr.p)
	}
	tr.closeAt(now)
	return now
}

func (tr *ServeTrial) judge(ph *Phase) {
	tr.in = false
	tr.phase++
	tr.judged(ph.Judge(&tr.x))
}

func (tr *ServeTrial) mark(now time.Duration, psn bth.PSN) {
	if !tr.x.Marked {
		tr.x.Marked, tr.x.Mark, tr.x.MarkPSN = true, now, psn
	}
}

// FromPeer takes a frame the requester sent the puppet's QP at now and
// reports whether the responder may have it.
func (tr *ServeTrial) FromPeer(frame []byte, now time.Duration) bool {
	data := append([]byte(nil), frame...)
	tr.frames = append(tr.frames, Frame{At: now, Data: data})
	a := Answer{At: now, Raw: data}
	if a.Decode(data) != nil || !a.Opcode().IsRequest() || !a.VerifyICRC() {
		return true
	}
	isNew := tr.fl.request(&a.Frame)
	if !tr.in || tr.done {
		return true
	}
	r := Req{Answer: a, New: isNew}
	tr.x.Reqs = append(tr.x.Reqs, r)
	psn := a.BTH.PSN()
	st := &tr.st
	switch tr.c.Serve[tr.phase].Do {
	case ActSeqNak, ActRNR, ActDropRead, ActReadGap:
		if !isNew && st.targetSet && psn.Diff(st.target) >= 0 && psn.Diff(st.targetLast) <= 0 {
			st.released = true
		}
	}
	return true
}

// ToPeer takes an answer the responder sends the requester at now and
// returns what goes out in its place: nil when it is withheld.
func (tr *ServeTrial) ToPeer(frame []byte, now time.Duration) [][]byte {
	var a Answer
	if a.Decode(frame) != nil || !a.IsResponse() {
		return tr.pass(frame, now)
	}
	if !tr.in || tr.done {
		return tr.pass(frame, now)
	}
	a.At = now
	ph := &tr.c.Serve[tr.phase]
	st := &tr.st
	psn := a.BTH.PSN()
	newInPhase := tr.x.Seen && psn.Diff(tr.x.Next) >= 0 || !tr.x.Seen
	hold := func() [][]byte {
		a.Raw = append([]byte(nil), frame...)
		tr.x.Held = append(tr.x.Held, a)
		return nil
	}
	switch ph.Do {
	case ActHold:
		return hold()
	case ActSeqNak, ActRNR:
		// The first answer of the kind the act is about is replaced,
		// and every answer after it withheld until that PSN comes again.
		want, syn := false, bth.NakPSNSeqError
		if ph.Do == ActSeqNak {
			op := a.Opcode()
			want = isAck(&a) || op == bth.RCReadResponseFirst || op == bth.RCReadResponseOnly || op == bth.RCAtomicAck
		} else {
			want, syn = isAck(&a) && tr.sendOnlyAt(psn), bth.RNRNakSyndrome(ph.RNRTimer)
		}
		switch {
		case !tr.x.Marked && newInPhase && want:
			g := ackFrom(frame, psn, syn)
			if g == nil {
				break
			}
			st.targetSet, st.target, st.targetLast = true, psn, psn
			tr.x.Target = tr.reqAt(psn)
			tr.mark(now, psn)
			return tr.pass(g, now)
		case tr.x.Marked && !st.released:
			return hold()
		}
	case ActCoalesce:
		if isAck(&a) && newInPhase && !tr.x.Marked {
			st.count++
			if st.count < ph.Count {
				return hold()
			}
			tr.mark(now, psn)
		}
	case ActDropRead, ActReadGap:
		if !st.targetSet && newInPhase && a.Opcode().IsReadResponse() {
			if r := tr.readAt(psn); r != nil {
				first, last := r.BTH.PSN(), r.BTH.PSN().Add(uint32(readSpan(r, tr.p.MTU)-1))
				if ph.Do == ActDropRead || last.Diff(first) >= 2 {
					st.targetSet, st.target, st.targetLast = true, first, last
					t := *r
					tr.x.Target = &t
				}
			}
		}
		if !st.targetSet {
			break
		}
		gap := st.target // ActDropRead: the whole READ; ActReadGap: its second packet
		end := st.targetLast
		if ph.Do == ActReadGap {
			gap, end = st.target.Add(1), st.target.Add(1)
		}
		switch {
		case !st.released && psn.Diff(gap) >= 0 && psn.Diff(end) <= 0:
			return hold()
		case psn.Diff(end) > 0 && !st.released:
			tr.mark(now, st.target)
		}
	case ActGhost:
		if !tr.x.Marked && isAck(&a) && tr.fl.tmpl != nil {
			var out [][]byte
			if tr.x.Acked != tr.p.PSN {
				out = append(out, ackFrom(tr.fl.tmpl, tr.x.Acked.Sub(1), bth.SyndromeACKNoCredits))
			}
			ghost := tr.fl.next.Add(64)
			out = append(out, ackFrom(tr.fl.tmpl, ghost, bth.SyndromeACKNoCredits))
			tr.mark(now, ghost)
			hold()
			for _, g := range out {
				tr.sent(g, now)
			}
			return out
		}
		return hold()
	}
	return tr.pass(frame, now)
}

// EmitCNPs returns the frames the running phase adds on its own at now:
// under ActCNP, a CNP to the requester's QP when one is due (the first
// once an answer reached the requester: it copies the addresses of the
// last ACK, or of the phase's last answer). Poll
// says when the next is due.
func (tr *ServeTrial) EmitCNPs(now time.Duration) [][]byte {
	if !tr.in || tr.done {
		return nil
	}
	ph := &tr.c.Serve[tr.phase]
	st := &tr.st
	if ph.Do != ActCNP || st.cnpAt > 0 && now < st.cnpAt {
		return nil
	}
	tmpl := tr.fl.tmpl // the last ACK, or for READs the last response
	if n := len(tr.x.Passed); tmpl == nil && n > 0 {
		tmpl = tr.x.Passed[n-1].Raw
	}
	if tmpl == nil {
		return nil
	}
	cnp := cnpFrom(tmpl)
	if cnp == nil {
		return nil
	}
	every := max(ph.Every, time.Microsecond)
	if st.cnpAt == 0 || now-st.cnpAt > every {
		st.cnpAt = now // late (the loop was busy): no burst to catch up
	}
	st.cnpAt += every
	tr.x.Vars["cnps"]++
	tr.mark(now, 0)
	tr.frames = append(tr.frames, Frame{At: now, Sent: true, Data: cnp})
	return [][]byte{cnp}
}

// cnpFrom builds a CNP with the addresses of tmpl (an answer to the
// requester) to its destination QP.
func cnpFrom(tmpl []byte) []byte {
	var f bth.Frame
	if f.Decode(tmpl) != nil {
		return nil
	}
	var ff bth.FrameFields
	f.Fields(&ff)
	ff.BTH = bth.CNPFields(0xffff, f.BTH.DestQP())
	buf := make([]byte, ff.FrameLen(0))
	n, err := bth.Build(buf, &ff, nil)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// pass lets an answer through: recorded, and noted in the flow.
func (tr *ServeTrial) pass(frame []byte, now time.Duration) [][]byte {
	tr.sent(frame, now)
	return [][]byte{frame}
}

// sent notes a frame that goes out to the requester.
func (tr *ServeTrial) sent(frame []byte, now time.Duration) {
	data := append([]byte(nil), frame...)
	tr.frames = append(tr.frames, Frame{At: now, Sent: true, Data: data})
	a := Answer{At: now, Raw: data}
	if a.Decode(data) != nil || !a.IsResponse() {
		return
	}
	tr.fl.answered(&a.Frame, data, now)
	if tr.in && !tr.done {
		tr.x.Passed = append(tr.x.Passed, a)
	}
}

// reqAt returns a copy of the phase's new request at psn, nil if none.
func (tr *ServeTrial) reqAt(psn bth.PSN) *Req {
	for i := range tr.x.Reqs {
		if r := tr.x.Reqs[i]; r.New && r.BTH.PSN() == psn {
			return &r
		}
	}
	return nil
}

// sendOnlyAt reports whether the phase's request at psn is a new SEND
// ONLY.
func (tr *ServeTrial) sendOnlyAt(psn bth.PSN) bool {
	for i := range tr.x.Reqs {
		r := &tr.x.Reqs[i]
		if r.New && r.BTH.PSN() == psn {
			return r.Opcode() == bth.RCSendOnly || r.Opcode() == bth.RCSendOnlyImm
		}
	}
	return false
}

// readAt returns the phase's new READ request whose responses include
// psn.
func (tr *ServeTrial) readAt(psn bth.PSN) *Req {
	for i := range tr.x.Reqs {
		r := &tr.x.Reqs[i]
		if !r.New || r.Opcode() != bth.RCReadRequest {
			continue
		}
		first := r.BTH.PSN()
		if psn.Diff(first) >= 0 && psn.Diff(first.Add(uint32(readSpan(r, tr.p.MTU)-1))) <= 0 {
			return r
		}
	}
	return nil
}

// readSpan returns the PSNs a READ request's responses take.
func readSpan(r *Req, mtu int) int {
	n := int(r.RETH.DMALen())
	if mtu <= 0 || n <= mtu {
		return 1
	}
	return (n + mtu - 1) / mtu
}
