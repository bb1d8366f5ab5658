package qp

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/bth"
)

// Never is the deadline Poll returns when no timer is armed.
const Never = time.Duration(1<<63 - 1)

// EngineConfig configures an Engine.
type EngineConfig struct {
	Out Output // where frames go; required
	// LocalIPs are the addresses (RoCE v2 GIDs) this engine answers to;
	// frames to other destinations are dropped. Empty accepts any.
	LocalIPs []netip.Addr
	// PortMTU is the port's active MTU, the path MTU of UD QPs (rxe: the
	// netdev MTU minus 80, rounded down: 1500 gives 1024). 0 means 1024.
	PortMTU MTU
	// MaxInflight is the most request packets (PSNs, READ responses
	// included) the engine's RC QPs together have in the network, waiting
	// for acknowledgement; QPs beyond it wait their turn (budget.go). 0
	// means DefaultMaxInflight; below 1 is taken as 1.
	MaxInflight int
	// LineRate is the port's speed in bits/s: DCQCN's highest rate, and
	// its rate on a QP's first CNP (cc.go). 0 means DefaultLineRate.
	LineRate int64
	// PaceBurst is the default burst of the QPs' pacers, in bytes: how
	// much a rate-limited QP may send at once after a late Poll
	// (pace.go). 0 means DefaultPaceBurst.
	PaceBurst int
	// CC configures congestion control: ECN, CNPs, DCQCN (cc.go).
	CC CCConfig
}

// Engine runs the transport of a set of queue pairs: it takes received
// frames and the current time (Input), sends what is ready and reports its
// next deadline (Poll). Time is a monotonic time.Duration from an epoch of
// the caller's choosing; the engine never reads a clock.
//
// An Engine and its QPs have one owner goroutine: nothing here may be called
// concurrently, except Stats.
type Engine struct {
	out   Output
	local []netip.Addr
	mtu   MTU
	qps   map[uint32]*QP
	frame bth.Frame
	now   time.Duration // time of the current Input or Poll
	// QPs to visit at the next Poll, and the timers of the others.
	ready, spare []*QP
	timers       timerHeap
	visits       uint64 // QPs polled, for tests
	// The transmit budget (budget.go): packets in flight, their bound,
	// and the QPs waiting for it, oldest at line[lineHead].
	inflight    int
	maxInflight int
	line        []*QP
	lineHead    int
	// The budget's peers: their accounts by remote address, how many
	// have packets in flight or QPs stopped, the share of each then, and
	// the peers with QPs stopped.
	peers       map[netip.Addr]*peer
	activePeers int
	share       int
	stopped     []*peer
	cc          ccState
	stats       Stats
}

// Stats are an engine's or a QP's counters (safe to read from any
// goroutine). A QP counts what concerns it; the engine counts everything,
// including frames that reach no QP. Frame and byte counts are of whole
// Ethernet frames, ICRC included.
type Stats struct {
	RxFrames    atomic.Uint64 // frames given to Input
	RxBytes     atomic.Uint64
	RxDropped   atomic.Uint64 // frames dropped, for any of the reasons below
	RxBadICRC   atomic.Uint64
	RxUnknownQP atomic.Uint64
	TxFrames    atomic.Uint64 // frames sent
	TxBytes     atomic.Uint64
	TxNoBuffer  atomic.Uint64 // Alloc returned nil
	Retransmits atomic.Uint64 // go-back-N restarts (timeout, NAK, implicit NAK)
	Timeouts    atomic.Uint64 // local ACK timeouts
	WindowCuts  atomic.Uint64 // requester windows halved for a loss (window.go)
	RNRNaksRx   atomic.Uint64
	RNRNaksTx   atomic.Uint64
	SeqNaksRx   atomic.Uint64
	SeqNaksTx   atomic.Uint64
	ErrNaksTx   atomic.Uint64 // invalid request, remote access and remote operational error NAKs sent
	Duplicates  atomic.Uint64 // duplicate requests answered
	ToError     atomic.Uint64 // QPs moved to ERR by an error

	// NAKs by kind (AETH syndromes 0x61, 0x62, 0x63), received and sent;
	// ErrNaksTx is the sum of the three sent.
	InvReqNaksRx, RemAccessNaksRx, RemOpNaksRx atomic.Uint64
	InvReqNaksTx, RemAccessNaksTx, RemOpNaksTx atomic.Uint64

	// Received frames dropped, by reason (each also in RxDropped, but for
	// RxOutOfSeq). The engine alone counts RxMalformed, RxBadICRC,
	// RxWrongVLAN, RxWrongAddress and RxUnknownQP: those reach no QP.
	RxMalformed    atomic.Uint64 // too short, not IPv4/IPv6 UDP to port 4791, bad BTH
	RxWrongVLAN    atomic.Uint64 // 802.1Q tagged with a VLAN ID other than 0 (see Input)
	RxWrongAddress atomic.Uint64 // destination IP is not one of LocalIPs
	RxBadState     atomic.Uint64 // the QP does not receive in its state (RESET, INIT, ERR; responses before RTS)
	RxBadKey       atomic.Uint64 // P_Key or (UD) Q_Key mismatch
	RxNotPeer      atomic.Uint64 // RC/UC frame from another address than the QP's peer, or of another transport
	RxNoRecv       atomic.Uint64 // no receive request (an RNR NAK on RC, a silent drop on UC and UD)
	RxInvalid      atomic.Uint64 // refused: bad opcode sequence or length, access error, stray response
	// RxOutOfSeq counts RC requests past a PSN gap, discarded silently
	// after the sequence NAK until the requester goes back (go-back-N).
	// They are answered by protocol, so not counted in RxDropped.
	RxOutOfSeq atomic.Uint64

	// Congestion control (cc.go): CE-marked data frames received from a
	// QP's peer, CNPs sent and received, CNPs dropped as invalid (each
	// also in RxDropped: unknown QP, not from its peer, wrong state or
	// P_Key), and the rate cuts DCQCN made.
	RxCE, TxCNP, RxCNP, RxBadCNP, RateCuts atomic.Uint64
	// Rate is, for a QP, the rate it is paced at now in bits/s (DCQCN's
	// or its static limit, the lower), 0 when it is not limited; the
	// engine's is 0. It is updated as the QP sends or gets CNPs.
	Rate atomic.Uint64
	// RateLowest is, for a QP, the lowest nonzero Rate it has had, 0 when
	// it was never limited.
	RateLowest atomic.Uint64
}

// NewEngine returns an engine with no queue pairs.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.Out == nil {
		return nil, errors.New("new engine: no output")
	}
	if cfg.PortMTU == 0 {
		cfg.PortMTU = MTU1024
	}
	if cfg.PortMTU.Bytes() == 0 {
		return nil, fmt.Errorf("new engine: port MTU %v: %w", cfg.PortMTU, ErrInvalidAttr)
	}
	if cfg.MaxInflight == 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	cc, err := newCCState(&cfg)
	if err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	e := &Engine{out: cfg.Out, mtu: cfg.PortMTU, qps: make(map[uint32]*QP), maxInflight: max(cfg.MaxInflight, 1), cc: cc,
		peers: map[netip.Addr]*peer{}}
	e.share = e.maxInflight
	for _, a := range cfg.LocalIPs {
		e.local = append(e.local, a.Unmap())
	}
	return e, nil
}

// Stats returns the engine's counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Config describes a queue pair to create.
type Config struct {
	Type Type
	// QPN is the 24-bit QP number, unique in the engine and not 0. QP 1 is
	// the General Services Interface (GSI, IBTA Vol. 1 §13.5.1): a UD QP
	// whose Q_Key is GSIQKey, which carries management datagrams (CM MADs).
	QPN       uint32
	SendCQ    CQ
	RecvCQ    CQ
	Mem       Memory // the protection domain's memory regions
	MaxSendWR int    // send queue depth; 0 means 128
	MaxRecvWR int    // receive queue depth; 0 means 128
	MaxSGE    int    // scatter/gather entries per work request; 0 means 4
	MaxInline int    // inline data per send request; 0 means none
	SignalAll bool   // every send request completes (sq_sig_all)
	SRQ       *SRQ   // if set, receive requests come from this shared queue
	// RateLimit is the QP's static maximum rate in bits/s of frames on
	// the wire (pace.go), 0 for none; RateBurst the burst its pacer lets
	// go at once in bytes, 0 for EngineConfig.PaceBurst. See SetRateLimit.
	RateLimit int64
	RateBurst int
	// UDPSourcePort is the UDP source port of the QP's packets, from
	// 0xC000 up (the port is the sender's choice, ECMP entropy; receivers
	// accept any); 0 means 0xC000 + (hash(QPN) & 0x3fff), a fixed function
	// of the QP number, as rxe sends.
	UDPSourcePort uint16
}

// QP is a queue pair. It belongs to its Engine's owner goroutine.
type QP struct {
	e         *Engine
	qpn       uint32
	typ       Type
	state     State
	attr      Attr
	mem       Memory
	sendCQ    CQ
	recvCQ    CQ
	sigAll    bool
	maxSGE    int
	maxInl    int
	mtu       uint32
	sport     uint16
	ff        bth.FrameFields // frame template from the address vector
	blocked   bool            // Output ran out of buffers during this Poll
	woken     bool            // in the engine's ready list
	destroyed bool
	// dropCounted: the frame being input was dropped and its reason
	// counted.
	dropCounted bool
	heapAt      time.Duration // earliest deadline of q in the engine's timer heap, Never if none
	// The transmit budget (budget.go): the packets q counts in the
	// engine's inflight; in the engine's line; on its turn, and the packets
	// sent in it; the next packet asks for an ACK; one packet at a time
	// after an ACK timeout, until progress.
	charged    int
	inLine     bool
	peer       *peer
	inPeerLine bool
	turn       bool
	turnSent   int
	ackNow     bool
	recovering bool
	// The window (window.go): its width in PSNs, the PSNs acknowledged
	// towards its growth and compPSN when they were last counted, and
	// the PSN sent last when it was last cut.
	win, winAcked  int
	winPSN, cutPSN bth.PSN
	// Congestion control (cc.go, pace.go): the static rate limit and
	// the pacer's burst (0: the engine's); DCQCN; the pacer's bucket and
	// when it was filled, and until when q waits for it in this Poll
	// (Never if not); the time of the last CNP armed, and the CNPs
	// to send.
	rateLimit int64
	burst     int
	rp        DCQCN
	credit    int64 // the pacer's bucket, in bytes
	creditAt  time.Duration
	paceAt    time.Duration
	lastCNP   time.Duration
	cnpDue    int
	scratch   [8]byte
	wc        WC // completion handed to a CQ
	stats     Stats

	// Send queue: a ring indexed by free-running counters. [sqHead, sqReq)
	// are started and wait for completion, [sqReq, sqTail) wait to be sent.
	sq                    []sendWQE
	sqHead, sqReq, sqTail uint32
	sqCap, rqCap          uint32 // the queues' depths; sq and rq grow up to them

	// Requester.
	reqPSN    bth.PSN // next PSN to send
	sentPSN   bth.PSN // one past the highest PSN sent
	noAck     int     // packets since the last AckReq
	rdOut     int     // READs and atomics outstanding
	compPSN   bth.PSN // oldest PSN not yet acknowledged
	retryLeft uint8
	rnrLeft   uint8
	rewound   bool // a go-back-N to compPSN is under way; set until progress
	timer     timers

	// Receive queue ring, or the SRQ and the request taken from it.
	rq             []recvWQE
	rqHead, rqTail uint32
	srq            *SRQ
	cur            recvWQE
	curHeld        bool

	// Responder.
	ePSN      bth.PSN // expected PSN
	msn       uint32  // message sequence number
	nakSent   bool    // a PSN sequence or RNR NAK was sent for the current gap
	in        inMsg
	ackDue    bool
	ackPSN    bth.PSN
	res       []resource // responder resources for READs and atomics, oldest at resNext
	resStore  []resource
	resNext   int
	resActive int // resources with responses to send
	// overrun: a READ or atomic came while every resource still had its
	// first response to send; the responder takes nothing more and, once
	// those responses are out, NAKs it Invalid Request (responder.go).
	overrun bool

	// segs holds the registered memory of the packet being handled, only
	// while it is handled (memory.go).
	segs [][]byte
}

// CreateQP adds a queue pair in the RESET state.
func (e *Engine) CreateQP(cfg Config) (*QP, error) {
	switch {
	case cfg.Type != RC && cfg.Type != UC && cfg.Type != UD:
		return nil, fmt.Errorf("create qp: type %v: %w", cfg.Type, ErrInvalidAttr)
	case cfg.QPN < 1 || cfg.QPN > bth.PSNMask:
		return nil, fmt.Errorf("create qp %#x: number out of range: %w", cfg.QPN, ErrInvalidAttr)
	case cfg.QPN == GSIQPN && cfg.Type != UD:
		return nil, fmt.Errorf("create qp 1: the GSI QP is UD, not %v: %w", cfg.Type, ErrInvalidAttr)
	case cfg.RateLimit < 0 || cfg.RateBurst < 0 || cfg.RateBurst > maxPaceBurst:
		return nil, fmt.Errorf("create qp %#x: rate limit %d b/s, burst %d: %w", cfg.QPN, cfg.RateLimit, cfg.RateBurst, ErrInvalidAttr)
	case e.qps[cfg.QPN] != nil:
		return nil, fmt.Errorf("create qp %#x: number in use: %w", cfg.QPN, ErrInvalidAttr)
	case cfg.SendCQ == nil || cfg.RecvCQ == nil || cfg.Mem == nil:
		return nil, fmt.Errorf("create qp %#x: needs send CQ, receive CQ and memory: %w", cfg.QPN, ErrInvalidAttr)
	}
	def := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	q := &QP{
		e: e, qpn: cfg.QPN, typ: cfg.Type, mem: cfg.Mem, sendCQ: cfg.SendCQ, recvCQ: cfg.RecvCQ,
		sigAll: cfg.SignalAll, maxSGE: def(cfg.MaxSGE, 4), maxInl: max(cfg.MaxInline, 0),
	}
	// The rings grow to their depths as requests are posted (queues.go):
	// an idle QP holds none of them.
	q.sqCap, q.rqCap = uint32(def(cfg.MaxSendWR, 128)), uint32(def(cfg.MaxRecvWR, 128))
	if cfg.SRQ != nil {
		if cfg.SRQ.e != e {
			return nil, fmt.Errorf("create qp %#x: SRQ of another engine: %w", cfg.QPN, ErrInvalidAttr)
		}
		if cfg.SRQ.dead {
			return nil, fmt.Errorf("create qp %#x: SRQ: %w", cfg.QPN, ErrDestroyed)
		}
		q.srq = cfg.SRQ
		q.cur.sge = make([]SGE, 0, cfg.SRQ.maxSGE)
	}
	if q.srq != nil {
		q.srq.nqp++
	}
	nseg := q.maxSGE
	if q.srq != nil {
		nseg = max(nseg, q.srq.maxSGE)
	}
	q.segs = make([][]byte, 0, nseg)
	q.resStore = make([]resource, 1) // grown to max_dest_rd_atomic by Modify
	q.sport = cfg.UDPSourcePort
	if q.sport == 0 {
		h := fnv.New32a()
		h.Write([]byte{byte(cfg.QPN >> 16), byte(cfg.QPN >> 8), byte(cfg.QPN)})
		q.sport = 0xC000 + uint16(h.Sum32()&0x3fff)
	}
	q.heapAt = Never
	q.rateLimit, q.burst = cfg.RateLimit, cfg.RateBurst
	q.reset()
	q.noteRate(0)
	e.qps[cfg.QPN] = q
	return q, nil
}

// QP returns the engine's queue pair numbered qpn, or nil.
func (e *Engine) QP(qpn uint32) *QP { return e.qps[qpn] }

// Destroy removes the QP from the engine without completions. It is
// idempotent.
func (q *QP) Destroy() {
	if q.destroyed {
		return
	}
	if q.srq != nil {
		q.srq.nqp--
	}
	delete(q.e.qps, q.qpn)
	q.state = StateReset
	q.destroyed = true
	q.recharge()
	q.detachPeer()
}

// Stats returns the QP's counters.
func (q *QP) Stats() *Stats { return &q.stats }

// count adds one to an engine counter and the QP's own.
func (q *QP) count(engine, own *atomic.Uint64) {
	engine.Add(1)
	own.Add(1)
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the QP's transport type.
func (q *QP) Type() Type { return q.typ }

// UDPSourcePort returns the UDP source port of the QP's packets
// (Config.UDPSourcePort).
func (q *QP) UDPSourcePort() uint16 { return q.sport }

func (q *QP) setAV(av *AddressVector) {
	if q.peer != nil && q.peer.addr != av.DstIP.Unmap() {
		q.detachPeer() // recharge attaches it to its new peer
	}
	q.ff.SrcMAC, q.ff.DstMAC = av.SrcMAC, av.DstMAC
	q.ff.SrcIP, q.ff.DstIP = av.SrcIP, av.DstIP
	q.ff.TOS, q.ff.TTL, q.ff.FlowLabel = q.e.cc.tos(av.TrafficClass), av.HopLimit, av.FlowLabel
	if q.ff.TTL == 0 {
		q.ff.TTL = 64
	}
	q.ff.SrcPort = q.sport
}

func (q *QP) onRTR() {
	if q.typ == UD {
		q.attr.PathMTU = q.e.mtu
		q.mtu = uint32(q.e.mtu.Bytes())
	}
	q.ePSN = q.attr.RQPSN
	q.msn = 0
	q.resetResponder()
}

func (q *QP) onRTS() {
	q.reqPSN, q.sentPSN, q.compPSN = q.attr.SQPSN, q.attr.SQPSN, q.attr.SQPSN
	q.resetWindow()
	q.noAck = 0
	q.retryLeft, q.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	q.rewound = false
	q.recovering = false
	q.timer = timers{}
}

// Input processes received frames at time now. Frames that are not valid
// RoCE v2 packets for one of the engine's QPs are counted and dropped.
// The engine serves an untagged interface: a frame with an 802.1Q tag is
// taken only with VLAN ID 0 (priority-tagged, as RoCE uses for PFC); any
// other VLAN is another network that the kernel, and so rxe, would not
// deliver here, and is dropped as RxWrongVLAN. The
// frames are not kept: the caller may release them when Input returns.
// Call Poll afterwards to send what became ready (ACKs are coalesced over
// the batch).
func (e *Engine) Input(frames [][]byte, now time.Duration) {
	e.now = now
	for _, b := range frames {
		f := &e.frame
		if f.Decode(b) != nil {
			e.stats.RxFrames.Add(1)
			e.stats.RxBytes.Add(uint64(len(b)))
			e.stats.RxMalformed.Add(1)
			e.stats.RxDropped.Add(1)
			continue
		}
		e.inputDecoded(f, len(b))
	}
}

// InputDecoded is Input for one frame of size bytes that the caller
// decoded already (a router that read its destination QP, say), so that
// it is parsed once: f views the frame, which must stay unchanged until
// InputDecoded returns. The checks that follow decoding (VLAN, ICRC) run
// as in Input.
func (e *Engine) InputDecoded(f *bth.Frame, size int, now time.Duration) {
	e.now = now
	e.inputDecoded(f, size)
}

// inputDecoded counts and checks a decoded frame of n bytes and hands it
// to its QP.
func (e *Engine) inputDecoded(f *bth.Frame, n int) {
	e.stats.RxFrames.Add(1)
	e.stats.RxBytes.Add(uint64(n))
	if f.VLAN != nil && f.VLAN.ID() != 0 {
		e.stats.RxWrongVLAN.Add(1)
		e.stats.RxDropped.Add(1)
		return
	}
	if !f.VerifyICRC() {
		e.stats.RxBadICRC.Add(1)
		e.stats.RxDropped.Add(1)
		return
	}
	if !e.accept(f, n) {
		e.stats.RxDropped.Add(1)
	}
}

// accept dispatches a decoded frame to its QP; false means dropped.
func (e *Engine) accept(f *bth.Frame, n int) bool {
	op := f.Opcode()
	if len(e.local) > 0 {
		dst := f.DstIP().Unmap()
		found := false
		for _, a := range e.local {
			if a == dst {
				found = true
				break
			}
		}
		if !found {
			e.stats.RxWrongAddress.Add(1)
			return false
		}
	}
	if op == bth.OpCNP {
		if q := e.qps[f.BTH.DestQP()]; q != nil {
			q.stats.RxFrames.Add(1)
			q.stats.RxBytes.Add(uint64(n))
		}
		return e.onCNP(f)
	}
	q := e.qps[f.BTH.DestQP()]
	if q == nil {
		e.stats.RxUnknownQP.Add(1)
		return false
	}
	q.stats.RxFrames.Add(1)
	q.stats.RxBytes.Add(uint64(n))
	if f.ECN() == bth.CE {
		q.onCE(f, op)
	}
	q.dropCounted = false
	ok := q.input(f, op)
	q.recharge()
	if !ok {
		q.stats.RxDropped.Add(1)
		if !q.dropCounted {
			q.count(&e.stats.RxInvalid, &q.stats.RxInvalid)
		}
	}
	q.wake() // even a dropped response may have acknowledged something
	return ok
}

func pkeyMatch(a, b uint16) bool {
	return a&0x7fff == b&0x7fff && (a|b)&0x8000 != 0
}

// input handles one frame addressed to q.
func (q *QP) input(f *bth.Frame, op bth.Opcode) bool {
	if q.state < StateRTR || q.state == StateErr {
		return q.drop(&q.e.stats.RxBadState, &q.stats.RxBadState)
	}
	if !pkeyMatch(f.BTH.PKey(), q.attr.PKey) {
		return q.drop(&q.e.stats.RxBadKey, &q.stats.RxBadKey)
	}
	switch q.typ {
	case RC:
		if op.Transport() != bth.RC || !q.fromPeer(f) {
			return q.drop(&q.e.stats.RxNotPeer, &q.stats.RxNotPeer)
		}
		if op.IsRequest() {
			return q.rcRequest(f, op)
		}
		if q.state != StateRTS && q.state != StateSQD {
			return q.drop(&q.e.stats.RxBadState, &q.stats.RxBadState)
		}
		return q.onResponse(f, op)
	case UC:
		if op.Transport() != bth.UC || !q.fromPeer(f) {
			return q.drop(&q.e.stats.RxNotPeer, &q.stats.RxNotPeer)
		}
		return q.ucRequest(f, op)
	case UD:
		if op.Transport() != bth.UD {
			return q.drop(&q.e.stats.RxNotPeer, &q.stats.RxNotPeer)
		}
		return q.udRequest(f, op)
	}
	return false
}

// drop counts a dropped frame's reason in the engine's counter and the
// QP's, and returns false (not accepted).
func (q *QP) drop(engine, own *atomic.Uint64) bool {
	q.count(engine, own)
	q.dropCounted = true
	return false
}

func (q *QP) fromPeer(f *bth.Frame) bool {
	return f.SrcIP().Unmap() == q.attr.AV.DstIP.Unmap() && f.DstIP().Unmap() == q.attr.AV.SrcIP.Unmap()
}

func (q *QP) poll(now time.Duration) time.Duration {
	q.e.now = now
	if q.state == StateReset || q.state == StateInit || q.state == StateErr {
		return Never
	}
	q.blocked = false
	q.paceAt = Never
	q.runTimers(now)
	q.flushCNP()
	q.flushResponses()
	q.runRequester(now)
	q.recharge()
	if q.blocked {
		return now
	}
	return min(q.timer.next(q), q.paceAt)
}

// alloc returns a transmit buffer or nil, noting that Output ran dry.
func (q *QP) alloc() []byte {
	b := q.e.out.Alloc()
	if b == nil {
		q.blocked = true
		q.count(&q.e.stats.TxNoBuffer, &q.stats.TxNoBuffer)
	}
	return b
}

// MaxFrameLen returns the size of the largest frame a QP with path MTU m
// sends: Ethernet, IPv6, UDP, BTH, the largest extension headers, a full
// payload and the ICRC. Output.Alloc must hand out buffers at least this
// long.
func MaxFrameLen(m MTU) int {
	return bth.EthernetSize + bth.VLANSize + bth.IPv6Size + bth.UDPSize + bth.BTHSize +
		bth.DETHSize + bth.RETHSize + bth.ImmDtSize + bth.IETHSize + m.Bytes() + bth.ICRCSize
}

// send builds the frame described by q.ff with a payload of n bytes already
// at its place in buf, hands it to Output and returns its length.
func (q *QP) send(buf []byte, ff *bth.FrameFields, n int) int {
	l, err := bth.BuildInPlace(buf, ff, n)
	if err != nil {
		// Only a programming error gets here: a buffer from Output.Alloc
		// shorter than MaxFrameLen.
		panic(fmt.Sprintf("qp %#x: build %v: %v", q.qpn, ff.BTH.Opcode, err))
	}
	q.e.out.Send(buf[:l])
	q.count(&q.e.stats.TxFrames, &q.stats.TxFrames)
	q.e.stats.TxBytes.Add(uint64(l))
	q.stats.TxBytes.Add(uint64(l))
	return l
}
