package conform

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/qp"
)

// The requester under test in these tests is package qp's engine on a
// fake clock, its QP driven as a perftest client drives its own (a window
// of signaled requests kept full, one posted at most every postEvery),
// behind a Wire that can make it deliberately wrong: hooks on what reaches
// it (in) and what it sends (out). The puppet's Server is the other end.

const (
	serveQPN  = 0x77     // the puppet's QP
	servePSN  = 7000     // its first PSN
	peerPSN   = 0xfffff0 // the requester's first PSN: it wraps during the checks
	postEvery = 100 * time.Microsecond
	wireDelay = 20 * time.Microsecond
)

// reqSetup is a requester's workload and configuration.
type reqSetup struct {
	name    string
	traffic Traffic
	size    int
	window  int
	retry   uint8 // its retry count (7: as perftest sets it)
}

var reqSetups = []reqSetup{
	{"write", TrafficWrite, 64, 8, 7},
	{"send", TrafficSend, 64, 8, 7},
	{"read", TrafficRead, 4000, 4, 7},
	{"write-retry3", TrafficWrite, 64, 8, 3},
}

// reqSim is the Wire between the Server and the requester under test.
type reqSim struct {
	t       testing.TB
	su      reqSetup
	now     time.Duration
	e       *qp.Engine
	q       *qp.QP
	local   []byte
	toPeer  []Frame // from the server, arriving at At
	toSrv   []Frame // from the requester, arriving at At
	in, out func(s *reqSim, f []byte) [][]byte
	posted  int
	done    int
	failed  []qp.WCStatus
	next    time.Duration // the engine's deadline
	postAt  time.Duration // the next post allowed
	rva     uint64
	rkey    uint32
	state   map[string]int
	timeout uint8 // the requester's ACK timeout code as configured
}

type reqOut struct{ s *reqSim }

func (o reqOut) Alloc() []byte { return make([]byte, qp.MaxFrameLen(qp.MTU4096)) }
func (o reqOut) Send(f []byte) {
	s := o.s
	frames := [][]byte{f}
	if s.out != nil {
		frames = s.out(s, f)
	}
	for _, g := range frames {
		s.toSrv = append(s.toSrv, Frame{At: s.now + wireDelay, Data: g})
	}
}

type reqCQ struct{ s *reqSim }

func (c reqCQ) Complete(wc *qp.WC) {
	c.s.done++
	if wc.Status != qp.WCSuccess {
		c.s.failed = append(c.s.failed, wc.Status)
	}
}

type peerMem struct{ b []byte }

func (m *peerMem) Local(k uint32, a uint64, n uint32, _ qp.Access) ([]byte, bool) {
	if k != 9 || a+uint64(n) > uint64(len(m.b)) {
		return nil, false
	}
	return m.b[a : a+uint64(n)], true
}
func (m *peerMem) Remote(uint32, uint64, uint32, qp.Access) ([]byte, bool) { return nil, false }
func (m *peerMem) Invalidate(uint32) bool                                  { return false }

// newServeSim returns the Server and the requester under test, connected,
// traffic flowing; w makes the requester wrong.
func newServeSim(t testing.TB, su reqSetup, w wrongReq) (*Server, *reqSim) {
	s := &reqSim{t: t, su: su, state: map[string]int{}, in: w.in, out: w.out, timeout: 14}
	if w.timeout != 0 {
		s.timeout = w.timeout
	}
	srv, err := NewServer(s, ServerConfig{IP: puppetIP, PeerIP: targetIP, MAC: puppetMAC, PeerMAC: targetMAC})
	if err != nil {
		t.Fatal(err)
	}
	s.rva, s.rkey = srv.Region(1 << 16)
	peer := Peer{QPN: targetQPN, PSN: peerPSN, MTU: 1024, Traffic: su.traffic, Size: su.size, Timeout: 14, RetryCnt: su.retry, RetryKnown: true}
	c := ServeQP{QPN: serveQPN, PSN: servePSN, Peer: peer}
	if su.traffic == TrafficSend {
		c.Recvs, c.RecvLen = 64, su.size
	}
	if err := srv.AddQP(c); err != nil {
		t.Fatal(err)
	}
	if s.e, err = qp.NewEngine(qp.EngineConfig{Out: reqOut{s}, LocalIPs: []netip.Addr{targetIP}, CC: w.cc}); err != nil {
		t.Fatal(err)
	}
	s.local = make([]byte, 1<<16)
	if s.q, err = s.e.CreateQP(qp.Config{Type: qp.RC, QPN: targetQPN, Mem: &peerMem{s.local}, SendCQ: reqCQ{s}, RecvCQ: reqCQ{s}, MaxSendWR: 64}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		a qp.Attr
		m qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, PKey: 0xffff, Port: 1, AccessFlags: qp.AccessLocalWrite}, qp.AttrPKey | qp.AttrPort | qp.AttrAccessFlags},
		{qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU1024, DestQPN: serveQPN, RQPSN: servePSN, MaxDestRdAtomic: 4, MinRNRTimer: 12,
			AV: qp.AddressVector{SrcIP: targetIP, DstIP: puppetIP, SrcMAC: targetMAC, DstMAC: puppetMAC}},
			qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer | qp.AttrAV},
		{qp.Attr{State: qp.StateRTS, SQPSN: peerPSN, Timeout: s.timeout, RetryCnt: su.retry, RNRRetry: 7, MaxRdAtomic: 16},
			qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic},
	} {
		if err := s.q.Modify(&st.a, qp.AttrState|st.m); err != nil {
			t.Fatal(err)
		}
	}
	s.next = qp.Never
	// Traffic flows before any check, as the tool's run starts.
	if err := srv.Serve(20*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	return srv, s
}

func (s *reqSim) Now() time.Duration { return s.now }

func (s *reqSim) Send(frames [][]byte) error {
	for _, f := range frames {
		s.toPeer = append(s.toPeer, Frame{At: s.now + wireDelay, Data: append([]byte(nil), f...)})
	}
	return nil
}

// step delivers what is due to the requester, keeps its window full and
// polls it.
func (s *reqSim) step() {
	var in [][]byte
	for len(s.toPeer) > 0 && s.toPeer[0].At <= s.now {
		f := s.toPeer[0].Data
		s.toPeer = s.toPeer[1:]
		if s.in != nil {
			in = append(in, s.in(s, f)...)
		} else {
			in = append(in, f)
		}
	}
	if len(in) > 0 {
		s.e.Input(in, s.now)
	}
	if s.q.State() == qp.StateRTS && s.posted-s.done < s.su.window && s.now >= s.postAt {
		wr := qp.SendWR{ID: uint64(s.posted), Flags: qp.SendSignaled, SGL: []qp.SGE{{Addr: 0, Length: uint32(s.su.size), LKey: 9}},
			RemoteAddr: s.rva + uint64(s.posted%8)*uint64(s.su.size), RKey: s.rkey}
		switch s.su.traffic {
		case TrafficWrite:
			wr.Opcode = qp.WRRDMAWrite
		case TrafficSend:
			wr.Opcode = qp.WRSend
		case TrafficRead:
			wr.Opcode = qp.WRRDMARead
		case TrafficAtomic:
			wr.Opcode, wr.SGL[0].Length, wr.RemoteAddr = qp.WRAtomicFetchAdd, 8, s.rva
		}
		if err := s.q.PostSend(&wr); err != nil {
			s.t.Fatalf("post: %v", err)
		}
		s.posted++
		s.postAt = s.now + postEvery
	}
	s.next = s.e.Poll(s.now)
}

func (s *reqSim) Receive(deadline time.Duration) ([]Frame, error) {
	for range 1 << 20 {
		s.step()
		n := 0
		for n < len(s.toSrv) && s.toSrv[n].At <= s.now {
			n++
		}
		if n > 0 {
			got := append([]Frame(nil), s.toSrv[:n]...)
			s.toSrv = s.toSrv[n:]
			return got, nil
		}
		t := min(deadline, s.next)
		if len(s.toPeer) > 0 {
			t = min(t, s.toPeer[0].At)
		}
		if len(s.toSrv) > 0 {
			t = min(t, s.toSrv[0].At)
		}
		if s.q.State() == qp.StateRTS && s.posted-s.done < s.su.window {
			t = min(t, max(s.postAt, s.now+time.Microsecond))
		}
		if t <= s.now {
			if s.now >= deadline {
				return nil, nil
			}
			t = s.now + time.Microsecond
		}
		s.now = t
	}
	s.t.Fatal("the simulated requester never settles")
	return nil, nil
}

// runServe runs requester check c against a fresh simulation of su.
func runServe(t testing.TB, c *Check, su reqSetup, w wrongReq) (Result, *reqSim) {
	srv, s := newServeSim(t, su, w)
	r := srv.Run(c, serveQPN)
	return r, s
}

// wrongReq is a deliberately wrong requester.
type wrongReq struct {
	name    string
	in, out func(s *reqSim, f []byte) [][]byte
	timeout uint8 // its ACK timeout code, when not the 14 the check is told
	cc      qp.CCConfig
	fails   []string
}

func decoded(f []byte) (bth.Frame, bool) {
	var fr bth.Frame
	return fr, fr.Decode(f) == nil
}

var wrongReqs = []wrongReq{
	{name: "times out after 4 ms, not the 67 ms it says", timeout: 10, fails: []string{"req.ack-timeout"}},
	{name: "ignores NAKs", fails: []string{"req.seq-nak"},
		in: func(s *reqSim, f []byte) [][]byte {
			if fr, ok := decoded(f); ok && fr.AETH != nil && fr.AETH.Syndrome().IsNAK() {
				return nil
			}
			return one(f)
		}},
	{name: "takes an RNR NAK for a sequence NAK", fails: []string{"req.rnr-timer"},
		in: func(s *reqSim, f []byte) [][]byte {
			return one(edit(f, func(fr *bth.Frame, ff *bth.FrameFields) {
				if fr.AETH != nil && fr.AETH.Syndrome().IsRNRNak() {
					ff.AETH.Syndrome = bth.NakPSNSeqError
				}
			}))
		}},
	{name: "takes an ACK of a PSN it never sent", fails: []string{"req.ghost-ack"},
		out: func(s *reqSim, f []byte) [][]byte {
			if fr, ok := decoded(f); ok && fr.Opcode().IsRequest() {
				if p := int(fr.BTH.PSN()); s.state["sent"] == 0 || bth.PSN(p).Diff(bth.PSN(s.state["max"])) > 0 {
					s.state["sent"], s.state["max"] = 1, p
				}
			}
			return one(f)
		},
		in: func(s *reqSim, f []byte) [][]byte {
			return one(edit(f, func(fr *bth.Frame, ff *bth.FrameFields) {
				if fr.Opcode() == bth.RCAck && fr.AETH.Syndrome().IsACK() && fr.BTH.PSN().Diff(bth.PSN(s.state["max"])) > 0 {
					ff.BTH.PSN = bth.PSN(s.state["max"])
				}
			}))
		}},
	{name: "ignores an ACK that covers more than one request", fails: []string{"req.coalesced-ack"},
		in: func(s *reqSim, f []byte) [][]byte {
			fr, ok := decoded(f)
			if !ok || fr.Opcode() != bth.RCAck || !fr.AETH.Syndrome().IsACK() {
				return one(f)
			}
			psn := fr.BTH.PSN()
			if last, ok := s.state["acked"]; ok && psn.Diff(bth.PSN(last).Add(1)) > 0 {
				return nil
			}
			s.state["acked"] = int(psn)
			return one(f)
		}},
	{name: "drops READ responses out of sequence until its timeout", fails: []string{"req.implied-nak", "req.read-gap"},
		in: func(s *reqSim, f []byte) [][]byte {
			fr, ok := decoded(f)
			if !ok || !fr.Opcode().IsReadResponse() {
				return one(f)
			}
			psn := fr.BTH.PSN()
			if exp, seen := s.state["exp"]; seen && psn.Diff(bth.PSN(exp)) > 0 {
				return nil
			}
			s.state["exp"] = int(psn.Add(1))
			return one(f)
		}},
	{name: "stops for good on a CNP", fails: []string{"req.cnp"},
		in: func(s *reqSim, f []byte) [][]byte {
			if fr, ok := decoded(f); ok && fr.Opcode() == bth.OpCNP {
				s.state["cnp"] = 1
			}
			return one(f)
		},
		out: func(s *reqSim, f []byte) [][]byte {
			if fr, ok := decoded(f); ok && fr.Opcode().IsRequest() && s.state["cnp"] == 1 {
				return nil
			}
			return one(f)
		}},
	{name: "resends each request at most twice", fails: []string{"req.retry-exhausted"},
		out: func(s *reqSim, f []byte) [][]byte {
			fr, ok := decoded(f)
			if !ok || !fr.Opcode().IsRequest() {
				return one(f)
			}
			k := "n" + fr.BTH.PSN().String()
			s.state[k]++
			if s.state[k] > 3 {
				return nil
			}
			return one(f)
		}},
}

// TestConformCorrectRequester runs every requester check against qp's
// requester in each setup: each passes, cannot run there (SKIP) or is a
// documented deviation (KNOWN), and each passes in some setup.
func TestConformCorrectRequester(t *testing.T) {
	passed := map[string]bool{}
	for _, su := range reqSetups {
		for _, c := range Checks() {
			if !c.IsRequester() {
				continue
			}
			t.Run(su.name+"/"+c.Name, func(t *testing.T) {
				r, s := runServe(t, c, su, wrongReq{})
				t.Logf("%v: %s %s", r.Verdict, r.Observed, r.Note)
				switch r.Verdict {
				case Pass:
					passed[c.Name] = true
				case Skip, Known:
				default:
					t.Errorf("%s against qp's requester: %v: %s", c.Name, r.Verdict, r.Observed)
				}
				if !c.Fatal && len(s.failed) > 0 {
					t.Errorf("the requester's work requests failed: %v", s.failed)
				}
			})
		}
	}
	for _, c := range Checks() {
		if c.IsRequester() && !passed[c.Name] {
			t.Errorf("%s never passed against qp's requester", c.Name)
		}
	}
}

// TestConformWrongRequesters: each deliberately wrong requester makes the
// checks it breaks FAIL in some setup, and every requester check is
// broken by one.
func TestConformWrongRequesters(t *testing.T) {
	broken := map[string]bool{}
	for _, w := range wrongReqs {
		for _, name := range w.fails {
			c := find(name)
			if c == nil {
				t.Fatalf("%s: no check %s", w.name, name)
			}
			t.Run(w.name+"/"+name, func(t *testing.T) {
				var got []string
				for _, su := range reqSetups {
					r, _ := runServe(t, c, su, w)
					got = append(got, su.name+": "+r.Verdict.String()+" "+r.Observed)
					if r.Verdict == Fail {
						broken[name] = true
						t.Logf("%s: FAIL: %s", su.name, r.Observed)
						return
					}
				}
				t.Errorf("a requester that %s passes %s: %q", w.name, name, got)
			})
		}
	}
	for _, c := range Checks() {
		if c.IsRequester() && !broken[c.Name] {
			t.Errorf("no wrong requester makes %s fail", c.Name)
		}
	}
}

// TestConformReqCNPNoReactionPoint: a requester that ignores CNPs (qp
// with its reaction point off, as rxe has none) keeps its rate, and
// req.cnp says it has no reaction point (SKIP), as resp.cnp does for a
// responder without a notification point.
func TestConformReqCNPNoReactionPoint(t *testing.T) {
	c := find("req.cnp")
	r, s := runServe(t, c, reqSetups[0], wrongReq{cc: qp.CCConfig{NoDCQCN: true}})
	t.Logf("%v: %s", r.Verdict, r.Observed)
	if r.Verdict != Skip || !strings.Contains(r.Observed, "no reaction point") {
		t.Errorf("req.cnp against a requester without a reaction point: %v: %s, want SKIP (no reaction point)", r.Verdict, r.Observed)
	}
	if st := s.e.Stats(); st.RxCNP.Load() < 100 {
		t.Errorf("the requester got %d CNPs, want one a millisecond for a second", st.RxCNP.Load())
	}
}
