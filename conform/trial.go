package conform

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/xroce/xroce/bth"
)

// Framer builds whole Ethernet frames from the puppet to the target:
// addresses and UDP port filled in, the ICRC computed. *rogue.Peer is one.
type Framer interface {
	Build(ff bth.FrameFields, payload []byte) []byte
}

// Frame is one frame of a trial, as sent or received.
type Frame struct {
	At   time.Duration // on the wire's clock
	Sent bool          // sent by the puppet (else received from the peer)
	Data []byte
}

// Answer is a decoded frame from the peer.
type Answer struct {
	At time.Duration
	bth.Frame
	Raw     []byte
	ICRCBad bool
}

// IsResponse reports whether a is an acknowledgement or a READ response.
func (a *Answer) IsResponse() bool {
	op := a.Opcode()
	return op == bth.RCAck || op == bth.RCAtomicAck || op.IsReadResponse()
}

func (a *Answer) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v PSN %d", a.Opcode(), a.BTH.PSN())
	if a.AETH != nil {
		syn := a.AETH.Syndrome()
		if syn.IsACK() {
			b.WriteString(" ACK")
		} else {
			b.WriteString(" " + syn.String())
		}
		fmt.Fprintf(&b, " MSN %d", a.AETH.MSN())
	}
	if a.AtomicAckETH != nil {
		fmt.Fprintf(&b, " orig %d", a.AtomicAckETH.OrigRemoteData())
	}
	if a.Opcode().IsReadResponse() {
		fmt.Fprintf(&b, " (%d B)", len(a.Payload))
	}
	return b.String()
}

// Ctx is what a step's judge sees.
type Ctx struct {
	T    *Target
	Self uint32 // the puppet's QP number
	// Got are the responses (ACKs, NAKs, READ responses, atomic ACKs)
	// to the puppet's QP that arrived during the step, in order; Other
	// the rest of the peer's RoCE frames (its own requests, frames to
	// other QPs).
	Got, Other []Answer
	// Sent are the PSNs of the step's packets, in order.
	Sent []bth.PSN
	// Vars carry values from one step to the next (an atomic's original
	// value ...).
	Vars map[string]uint64
	// Read is the data of the region read in earlier steps, by name.
	Read map[string][]byte

	// Requester checks (Phase): the requester under test, and during the
	// phase its requests (new and sent again), the answers that reached
	// it (passed, replaced or added) and those withheld.
	P      *Peer
	Reqs   []Req
	Passed []Answer
	Held   []Answer
	// At the phase's start: when it began, the first PSN never sent
	// (Next, valid when Seen), the oldest PSN not acknowledged to the
	// requester (Acked), and when the last answer reached it (LastAnswer).
	Start      time.Duration
	End        time.Duration // when the phase ended (set for its judge)
	Next       bth.PSN
	Acked      bth.PSN
	Seen       bool
	LastAnswer time.Duration
	// The phase's act: the request it is about (Target), and the moment
	// it took effect (Mark, MarkPSN), when Marked.
	Target  *Req
	Marked  bool
	Mark    time.Duration
	MarkPSN bth.PSN
}

// PSN returns the target's first PSN plus off.
func (x *Ctx) PSN(off int) bth.PSN { return x.T.PSN.Add(uint32(off)) }

// Result is a check's outcome against one QP.
type Result struct {
	Check    *Check  `json:"-"`
	Name     string  `json:"name"`
	Rule     string  `json:"rule"`
	Verdict  Verdict `json:"verdict"`
	Observed string  `json:"observed"`
	Note     string  `json:"note,omitempty"`
	// Frames are everything sent and received during the trial.
	Frames   []Frame       `json:"-"`
	Duration time.Duration `json:"duration_ns"`
}

// Trial runs one check against one target: a pure state machine driven
// by Poll and Input with the caller's clock. It belongs to one goroutine.
type Trial struct {
	record
	t      *Target
	fr     Framer
	self   uint32
	step   int  // the step running (or next to start)
	inStep bool // its packets are sent, answers are being collected
	until  time.Duration
	x      Ctx
}

// record is what a trial (Trial, ServeTrial) keeps of its check: the
// frames, the judges' observations, and once done the result.
type record struct {
	c      *Check
	start  time.Duration
	begun  bool
	frames []Frame
	obs    []string
	done   bool
	res    Result
}

func newRecord(c *Check) record {
	return record{c: c, res: Result{Check: c, Name: c.Name, Rule: c.Rule}}
}

// Done reports whether the trial has its result.
func (r *record) Done() bool { return r.done }

// Result returns the trial's result once Done.
func (r *record) Result() Result { return r.res }

// Frames returns the frames of the trial so far.
func (r *record) Frames() []Frame { return r.frames }

// begin notes the trial's first Poll.
func (r *record) begin(now time.Duration) {
	if !r.begun {
		r.begun, r.start = true, now
	}
}

// judged takes a step's or phase's outcome: its observation is kept, and
// anything but a pass ends the trial with its verdict.
func (r *record) judged(o Outcome) {
	if o.Obs != "" {
		r.obs = append(r.obs, o.Obs)
	}
	if v, note := r.c.verdictOf(o); v != Pass {
		r.finish(v, o.Obs, note)
	}
}

// passed ends a trial whose steps or phases all passed.
func (r *record) passed() { r.finish(Pass, strings.Join(r.obs, "; "), "") }

// closeAt completes the result of a trial that is done at now.
func (r *record) closeAt(now time.Duration) {
	r.res.Duration = now - r.start
	r.res.Frames = r.frames
}

func (r *record) finish(v Verdict, obs, note string) {
	r.done = true
	r.res.Verdict, r.res.Observed, r.res.Note = v, obs, note
}

// NewTrial prepares c against t; fr builds the puppet's frames and self
// is the puppet's QP number (where the peer's answers go).
func NewTrial(c *Check, t *Target, fr Framer, self uint32) *Trial {
	tr := &Trial{record: newRecord(c), t: t, fr: fr, self: self}
	tr.x = Ctx{T: t, Self: self, Vars: map[string]uint64{}, Read: map[string][]byte{}}
	if t.MTU == 0 {
		t.MTU = 1024
	}
	switch {
	case c.IsRequester():
		tr.finish(Skip, "a requester check: it runs against the peer's requester (Server.Run)", "")
	case t.UD && c.Needs&NeedUD == 0:
		tr.finish(Skip, "the QP under test is a UD QP, the check is about RC", "")
	case !t.UD && c.Needs&NeedUD != 0:
		tr.finish(Skip, "the QP under test is not a UD QP", "")
	case !t.Has(c.Needs):
		tr.finish(Skip, "the QP under test cannot host it: "+flagsText(c.Needs&^t.needsMet(), needNames), "")
	}
	return tr
}

// udNeed is NeedUD for a UD target.
func (t *Target) udNeed() Need {
	if t.UD {
		return NeedUD
	}
	return 0
}

// needsMet returns the needs t meets, one bit at a time.
func (t *Target) needsMet() Need {
	var n Need
	for bit := Need(1); bit != 0 && bit <= NeedLarge; bit <<= 1 {
		if t.Has(bit | t.udNeed()) {
			n |= bit
		}
	}
	return n
}

var needNames = []flagName[Need]{
	{NeedWrite, "no region open to remote WRITE"}, {NeedRead, "no region open to remote READ"},
	{NeedAtomic, "no region open to atomics"}, {NeedRecv, "no receives of known length"},
	{NeedNoRecv, "receives are posted"}, {NeedProbe, "neither WRITE nor a posted receive"},
	{NeedDenied, "no operation known to be denied"}, {NeedRdAtomic, "responder resources unknown"},
	{NeedRNRTimer, "RNR timer unknown"}, {NeedLarge, "no region or receive of 4 MTUs"},
}

// flagName names one flag of a set.
type flagName[T ~uint8 | ~uint16] struct {
	n T
	s string
}

// flagsText names the flags of n in names' order, comma-separated.
func flagsText[T ~uint8 | ~uint16](n T, names []flagName[T]) string {
	var s []string
	for _, x := range names {
		if n&x.n != 0 {
			s = append(s, x.s)
		}
	}
	return strings.Join(s, ", ")
}

// Poll advances the trial at time now: it returns the frames to send now
// (the puppet sends them in order) and when to call Poll again at the
// latest. When the trial is done it returns nil and Done is true.
func (tr *Trial) Poll(now time.Duration) (send [][]byte, next time.Duration) {
	tr.begin(now)
	for !tr.done {
		if tr.inStep {
			s := &tr.c.Steps[tr.step]
			if now < tr.until && (s.Until == 0 || len(tr.x.Got) < s.Until) {
				return nil, tr.until
			}
			tr.judge(s)
			continue
		}
		if tr.step >= len(tr.c.Steps) {
			tr.passed()
			break
		}
		s := &tr.c.Steps[tr.step]
		if !tr.t.Has(s.Needs | tr.t.udNeed()) {
			tr.step++
			continue
		}
		tr.x.Got, tr.x.Other, tr.x.Sent = nil, nil, nil
		for _, p := range s.Send {
			for _, f := range tr.build(&p) {
				tr.frames = append(tr.frames, Frame{At: now, Sent: true, Data: f})
				send = append(send, f)
			}
		}
		w := s.Wait
		if w == 0 {
			w = DefaultWait
		}
		tr.inStep, tr.until = true, now+w
		return send, tr.until
	}
	tr.closeAt(now)
	return nil, now
}

// judge ends the running step.
func (tr *Trial) judge(s *Step) {
	tr.inStep = false
	tr.step++
	tr.judged(s.Judge(&tr.x))
}

// verdictOf returns what a step's or phase's outcome makes of c: Pass (go
// on), Skip, or for a failure Known with the deviation's note when c lists
// its code, else Fail.
func (c *Check) verdictOf(o Outcome) (Verdict, string) {
	switch {
	case o.Skip:
		return Skip, ""
	case o.OK:
		return Pass, ""
	}
	for _, d := range c.Known {
		if d.Code != "" && d.Code == o.Code {
			return Known, d.Impl + ": " + d.Note
		}
	}
	return Fail, ""
}

// Input takes a frame received at time now. Frames that are not RoCE v2
// from the target's QP or to the puppet's are kept for the record only.
func (tr *Trial) Input(frame []byte, now time.Duration) {
	if tr.done {
		return
	}
	data := append([]byte(nil), frame...)
	tr.frames = append(tr.frames, Frame{At: now, Data: data})
	if !tr.inStep {
		return
	}
	a := Answer{At: now, Raw: data}
	if a.Decode(data) != nil {
		return
	}
	a.ICRCBad = !a.VerifyICRC()
	if a.BTH.DestQP() == tr.self && a.IsResponse() && !a.ICRCBad {
		tr.x.Got = append(tr.x.Got, a)
	} else {
		tr.x.Other = append(tr.x.Other, a)
	}
}

// ecnCE is the IP ECN codepoint Congestion Experienced (RFC 3168), the
// low two bits of the IPv4 TOS or IPv6 traffic class.
const ecnCE = 0x03

// pattern fills b with bytes that depend on their position.
func pattern(b []byte) {
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
}

// build returns the frames of p.
func (tr *Trial) build(p *Packet) [][]byte {
	t := tr.t
	op := p.Op
	n := p.Payload.of(t)
	switch op {
	case OpProbe:
		op = bth.RCSendOnly
		if t.Allows&OpWrite != 0 && t.Len >= uint32(n) {
			op = bth.RCWriteOnly
		}
	case OpDenied:
		switch {
		case t.Denies&OpRead != 0:
			op, n = bth.RCReadRequest, 0
		case t.Denies&OpWrite != 0:
			op = bth.RCWriteOnly
		default:
			op, n = bth.RCFetchAdd, 0
		}
	}
	if op == OpReadBurst {
		var out [][]byte
		for i := range t.MaxDestRdAtomic + 1 {
			q := *p
			q.Op, q.PSN = bth.RCReadRequest, p.PSN+i
			out = append(out, tr.build(&q)...)
		}
		return out
	}
	psn := t.PSN.Add(uint32(p.PSN))
	rkey := t.RKey
	if p.BadKey {
		rkey ^= 0x5a5a00
	}
	va := t.VA + uint64(p.Offset.of(t))
	dma := p.DMA.of(t)
	if op.IsWrite() && !p.DMASet {
		dma = n
	}
	if op == bth.RCReadRequest && !p.DMASet {
		dma = 8
	}
	payload := make([]byte, n)
	pattern(payload)

	// The packets: one, or a segmented SEND/WRITE.
	type seg struct {
		op  bth.Opcode
		off int
		n   int
	}
	segs := []seg{{op, 0, n}}
	if (op == bth.RCSendOnly || op == bth.RCWriteOnly) && n > t.MTU {
		first, middle, last := bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast
		if op == bth.RCWriteOnly {
			first, middle, last = bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast
		}
		segs = segs[:0]
		for off := 0; off < n; off += t.MTU {
			o := middle
			switch {
			case off == 0:
				o = first
			case off+t.MTU >= n:
				o = last
			}
			segs = append(segs, seg{o, off, min(t.MTU, n-off)})
		}
	}
	var out [][]byte
	for i, s := range segs {
		ff := bth.FrameFields{BTH: bth.BTHFields{Opcode: s.op, PKey: t.PKey, DestQP: t.QPN, PSN: psn.Add(uint32(i)),
			AckReq: (p.AckReq || len(segs) > 1) && i == len(segs)-1}}
		if ff.BTH.PKey == 0 {
			ff.BTH.PKey = 0xffff
		}
		if p.CE {
			ff.TOS = ecnCE
		}
		switch {
		case s.op.Headers().Has(bth.ExtDETH):
			ff.DETH = bth.DETHFields{QKey: t.QKey, SrcQP: tr.self}
			if p.BadQKey {
				ff.DETH.QKey ^= 0x5a5a5a5a
			}
		case s.op.Headers().Has(bth.ExtRETH):
			ff.RETH = bth.RETHFields{VA: va, RKey: rkey, DMALen: uint32(dma)}
		case s.op.Headers().Has(bth.ExtAtomicETH):
			ff.AtomicETH = bth.AtomicETHFields{VA: va, RKey: rkey, SwapAdd: p.SwapAdd, Compare: p.Compare}
		}
		switch p.Fault {
		case FaultPKey:
			ff.BTH.PKey = 0x1234
		case FaultDestQP:
			ff.BTH.DestQP = t.QPN ^ 0xc00000
		}
		f := tr.fr.Build(ff, payload[s.off:s.off+s.n])
		fault(f, p.Fault)
		for range max(p.Repeat, 1) {
			out = append(out, f)
		}
		tr.x.Sent = append(tr.x.Sent, ff.BTH.PSN)
	}
	return out
}

// fault breaks a built frame as f says, fixing the ICRC up again unless
// the ICRC is the fault.
func fault(frame []byte, f Fault) {
	var fr bth.Frame
	if f == FaultNone || f == FaultPKey || f == FaultDestQP || fr.Decode(frame) != nil {
		return
	}
	pkt := fr.Packet()
	b := fr.BTH
	switch f {
	case FaultICRC:
		pkt[len(pkt)-1] ^= 0xff
		return
	case FaultTVer:
		b[1] = b[1]&0xf0 | 1
	case FaultPadCnt:
		b[1] = b[1]&^0x30 | 3<<4
	}
	if c, err := bth.ICRC(pkt); err == nil {
		binary.LittleEndian.PutUint32(pkt[len(pkt)-4:], c)
	}
}
