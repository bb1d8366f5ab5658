package conform

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/qp"
)

// Server is the puppet as responder, for the requester checks: package
// qp's engine, which follows the rules, answers every QP of the requester
// under test (one puppet QP each, as the tool's exchange paired them),
// and Run puts a check's ServeTrial between it and one of them while the
// others go on being served. It belongs to one goroutine.
type Server struct {
	w      Wire
	cfg    ServerConfig
	e      *qp.Engine
	mem    serveMem
	qps    map[uint32]*serveQP // by the puppet QP's number
	byPeer map[uint32]*serveQP // by the requester's QP number
	pool   [][]byte            // free transmit buffers
	out    [][]byte            // frames the engine sent in this round
	done   []recvDone          // receives completed in this round, to post again
	next   time.Duration       // the engine's next deadline
	trial  *ServeTrial
	tq     *serveQP
	abort  bool // Abort: requests draw a fatal NAK, the engine sees none
	f      bth.Frame
}

// ServerConfig is where the puppet's server stands.
type ServerConfig struct {
	IP, PeerIP   netip.Addr
	MAC, PeerMAC [6]byte
}

// ServeQP is one puppet QP and the requester's QP it answers.
type ServeQP struct {
	QPN  uint32  // the puppet's QP number, as exchanged
	PSN  bth.PSN // the first PSN it would send
	Peer Peer    // the requester's QP
	// The receives kept posted for its SENDs (its WRITEs, READs and
	// atomics go to any region Region made).
	Recvs, RecvLen  int
	MaxDestRdAtomic uint8 // responder resources (0: 16)
	MinRNRTimer     uint8 // the RNR timer of its RNR NAKs (0: 12, 0.64 ms)
}

type serveQP struct {
	c       ServeQP
	q       *qp.QP
	fl      flow
	recvKey uint32 // its receive buffer
	recvVA  uint64
	aborted bool // Abort sent it its NAK
}

type recvDone struct {
	q  *serveQP
	id uint64
}

// NewServer returns a server on w with no QPs.
func NewServer(w Wire, cfg ServerConfig) (*Server, error) {
	s := &Server{w: w, cfg: cfg, qps: map[uint32]*serveQP{}, byPeer: map[uint32]*serveQP{}}
	e, err := qp.NewEngine(qp.EngineConfig{Out: serveOut{s}, LocalIPs: []netip.Addr{cfg.IP}, PortMTU: qp.MTU4096})
	if err != nil {
		return nil, err
	}
	s.e, s.next = e, qp.Never
	return s, nil
}

// Region registers a region of n bytes for a QP to offer and returns its
// address and R_Key, to advertise in the exchange.
func (s *Server) Region(n int) (va uint64, rkey uint32) {
	k := uint32(0x5100 + len(s.mem.regions))
	va = uint64(k) << 24
	s.mem.regions = append(s.mem.regions, serveRegion{key: k, va: va, b: make([]byte, n)})
	return va, k
}

// AddQP makes the puppet QP c describes and brings it to RTS towards the
// requester's QP.
func (s *Server) AddQP(c ServeQP) error {
	if c.MaxDestRdAtomic == 0 {
		c.MaxDestRdAtomic = 16
	}
	if c.MinRNRTimer == 0 {
		c.MinRNRTimer = 12
	}
	mtu := mtuOf(c.Peer.MTU)
	if mtu == 0 {
		return fmt.Errorf("conform: path MTU %d", c.Peer.MTU)
	}
	sq := &serveQP{c: c, fl: flow{mtu: c.Peer.MTU}}
	cq := serveCQ{s: s, q: sq}
	q, err := s.e.CreateQP(qp.Config{Type: qp.RC, QPN: c.QPN, Mem: &s.mem, SendCQ: cq, RecvCQ: cq,
		MaxRecvWR: max(c.Recvs, 1), MaxSGE: 1})
	if err != nil {
		return fmt.Errorf("conform: puppet QP %#x: %w", c.QPN, err)
	}
	sq.q = q
	steps := []struct {
		a qp.Attr
		m qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, PKey: 0xffff, Port: 1,
			AccessFlags: qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic | qp.AccessLocalWrite},
			qp.AttrPKey | qp.AttrPort | qp.AttrAccessFlags},
		{qp.Attr{State: qp.StateRTR, PathMTU: mtu, DestQPN: c.Peer.QPN, RQPSN: c.Peer.PSN,
			MaxDestRdAtomic: c.MaxDestRdAtomic, MinRNRTimer: c.MinRNRTimer,
			AV: qp.AddressVector{SrcIP: s.cfg.IP, DstIP: s.cfg.PeerIP, SrcMAC: s.cfg.MAC, DstMAC: s.cfg.PeerMAC}},
			qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer | qp.AttrAV},
		{qp.Attr{State: qp.StateRTS, SQPSN: c.PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic},
	}
	for _, st := range steps {
		if err := q.Modify(&st.a, qp.AttrState|st.m); err != nil {
			q.Destroy()
			return fmt.Errorf("conform: puppet QP %#x to %v: %w", c.QPN, st.a.State, err)
		}
	}
	if c.Recvs > 0 {
		sq.recvKey = uint32(0x5200 + len(s.mem.recvs))
		sq.recvVA = uint64(sq.recvKey) << 24
		s.mem.recvs = append(s.mem.recvs, serveRegion{key: sq.recvKey, va: sq.recvVA, b: make([]byte, c.Recvs*c.RecvLen)})
		for i := range c.Recvs {
			if err := s.postRecv(sq, uint64(i)); err != nil {
				q.Destroy()
				return err
			}
		}
	}
	s.qps[c.QPN], s.byPeer[c.Peer.QPN] = sq, sq
	return nil
}

// postRecv posts receive id (its slot of the QP's buffer) on sq.
func (s *Server) postRecv(sq *serveQP, id uint64) error {
	return sq.q.PostRecv(&qp.RecvWR{ID: id, SGL: []qp.SGE{{Addr: sq.recvVA + id*uint64(sq.c.RecvLen), Length: uint32(sq.c.RecvLen), LKey: sq.recvKey}}})
}

func mtuOf(n int) qp.MTU {
	for m := qp.MTU256; m <= qp.MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// Run runs requester check c on the requester's QP that the puppet's QP
// number qpn answers, serving every QP meanwhile, and returns its result.
// A trial ends when its phases are judged, after at most the sum of their
// waits plus a second.
func (s *Server) Run(c *Check, qpn uint32) Result {
	sq := s.qps[qpn]
	if sq == nil {
		return Result{Check: c, Name: c.Name, Rule: c.Rule, Verdict: Fail, Observed: fmt.Sprintf("no puppet QP %#x", qpn)}
	}
	tr := NewServeTrial(c, &sq.c.Peer, &sq.fl)
	if tr.Done() {
		return tr.Result()
	}
	limit := s.w.Now() + time.Second
	for i := range c.Serve {
		ph := &c.Serve[i]
		limit += ph.wait(&sq.c.Peer) + ph.after(&sq.c.Peer)
	}
	s.trial, s.tq = tr, sq
	defer func() { s.trial, s.tq = nil, nil }()
	var serr error
	err := s.loop(limit, func(now time.Duration) time.Duration {
		next := tr.Poll(now)
		if tr.Done() {
			return -1
		}
		if out := tr.EmitCNPs(now); len(out) > 0 {
			if serr = s.w.Send(out); serr != nil {
				return -1
			}
			next = min(next, tr.Poll(now))
		}
		return next
	})
	if err == nil {
		err = serr
	}
	r := tr.Result()
	switch {
	case err != nil:
		r.Verdict, r.Observed, r.Frames = Fail, "not run to the end: "+err.Error(), tr.Frames()
	case !tr.Done():
		r.Verdict, r.Observed, r.Frames = Fail, "not run to the end: the trial overran its time", tr.Frames()
	}
	return r
}

// Serve answers every QP, with no check, until stop reports true or d
// passed.
func (s *Server) Serve(d time.Duration, stop func() bool) error {
	return s.loop(s.w.Now()+d, func(now time.Duration) time.Duration {
		if stop != nil && stop() {
			return -1
		}
		return now + 50*time.Millisecond
	})
}

// Abort ends the requester's run for d: its next request on each QP
// draws NAK Remote Operational Error, which moves its QP to the error
// state and completes its work requests with an error, so that its tool
// ends rather than retry for ever (rxe's retry_cnt 7). The engine sees
// none of it.
func (s *Server) Abort(d time.Duration) error {
	s.abort = true
	defer func() { s.abort = false }()
	return s.Serve(d, func() bool {
		for _, sq := range s.qps {
			if !sq.aborted {
				return false
			}
		}
		return true
	})
}

// loop serves until limit or until poll, called each round with the time,
// returns a negative deadline; else poll's deadline bounds the wait.
func (s *Server) loop(limit time.Duration, poll func(now time.Duration) time.Duration) error {
	for range 1 << 26 {
		now := s.w.Now()
		next := poll(now)
		if next < 0 || now >= limit {
			return nil
		}
		got, err := s.w.Receive(min(next, s.next, limit))
		if err != nil {
			return err
		}
		if err := s.round(got); err != nil {
			return err
		}
	}
	return errors.New("the server overran its rounds")
}

// round hands the frames that came to the engine (through the trial for
// its QP), polls it and sends what it answered (through the trial).
func (s *Server) round(got []Frame) error {
	now := s.w.Now()
	var in [][]byte
	for _, f := range got {
		if s.f.Decode(f.Data) != nil {
			continue
		}
		sq := s.qps[s.f.BTH.DestQP()]
		if sq == nil || !s.f.Opcode().IsRequest() {
			in = append(in, f.Data)
			continue
		}
		if s.abort {
			if !sq.aborted && sq.fl.tmpl != nil && s.f.VerifyICRC() {
				if nak := ackFrom(sq.fl.tmpl, s.f.BTH.PSN(), bth.NakRemoteOpError); nak != nil {
					sq.aborted = true
					if err := s.w.Send([][]byte{nak}); err != nil {
						return err
					}
				}
			}
			continue
		}
		if s.trial != nil && sq == s.tq {
			if !s.trial.FromPeer(f.Data, f.At) {
				continue
			}
		} else if s.f.VerifyICRC() {
			sq.fl.request(&s.f)
		}
		in = append(in, f.Data)
	}
	if len(in) > 0 {
		s.e.Input(in, now)
	}
	s.next = s.e.Poll(now)
	for _, d := range s.done {
		if d.q.q.State() == qp.StateRTS {
			if err := s.postRecv(d.q, d.id); err != nil {
				return err
			}
		}
	}
	s.done = s.done[:0]
	if len(s.out) == 0 {
		return nil
	}
	var send [][]byte
	for _, f := range s.out {
		if s.f.Decode(f) != nil {
			send = append(send, f)
			continue
		}
		sq := s.byPeer[s.f.BTH.DestQP()]
		switch {
		case sq == nil:
			send = append(send, f)
		case s.trial != nil && sq == s.tq:
			send = append(send, s.trial.ToPeer(f, now)...)
		default:
			sq.fl.answered(&s.f, f, now)
			send = append(send, f)
		}
	}
	err := s.w.Send(send)
	s.pool = append(s.pool, s.out...)
	s.out = s.out[:0]
	return err
}

// serveOut is the engine's qp.Output: frames wait in s.out for the round
// to route them.
type serveOut struct{ s *Server }

func (o serveOut) Alloc() []byte {
	s := o.s
	if n := len(s.pool); n > 0 {
		b := s.pool[n-1]
		s.pool = s.pool[:n-1]
		return b[:cap(b)]
	}
	return make([]byte, qp.MaxFrameLen(qp.MTU4096))
}

func (o serveOut) Send(f []byte) { o.s.out = append(o.s.out, f) }

// serveCQ takes the completions of one puppet QP: receives are posted
// again after the round.
type serveCQ struct {
	s *Server
	q *serveQP
}

func (c serveCQ) Complete(wc *qp.WC) {
	if wc.Opcode == qp.WCRecv && wc.Status == qp.WCSuccess {
		c.s.done = append(c.s.done, recvDone{q: c.q, id: wc.ID})
	}
}

// serveMem is the puppet server's memory: the regions offered to the
// requesters and the receive buffers.
type serveMem struct {
	regions, recvs []serveRegion
}

type serveRegion struct {
	key uint32
	va  uint64
	b   []byte
}

func (r *serveRegion) at(va uint64, n uint32) ([]byte, bool) {
	if va < r.va || va-r.va+uint64(n) > uint64(len(r.b)) {
		return nil, false
	}
	off := va - r.va
	return r.b[off : off+uint64(n)], true
}

func (m *serveMem) Local(k uint32, va uint64, n uint32, _ qp.Access) ([]byte, bool) {
	for i := range m.recvs {
		if m.recvs[i].key == k {
			return m.recvs[i].at(va, n)
		}
	}
	return nil, false
}

func (m *serveMem) Remote(k uint32, va uint64, n uint32, _ qp.Access) ([]byte, bool) {
	for i := range m.regions {
		if m.regions[i].key == k {
			return m.regions[i].at(va, n)
		}
	}
	return nil, false
}

func (m *serveMem) Invalidate(uint32) bool { return false }
