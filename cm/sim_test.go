package cm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/mad"
)

// simNet joins CM engines by a network on a fake clock: each MAD arrives
// delay later, or is lost or duplicated as the test's fault says.
type simNet struct {
	t      testing.TB
	now    time.Duration
	delay  time.Duration
	queue  []simMsg
	nodes  map[netip.Addr]*simNode
	fault  func(m mad.MAD) (lose, dup bool)
	trace  []string
	sent   [numAttrs]int
	maxLen int
}

type simMsg struct {
	at   time.Duration
	from Peer
	to   netip.Addr
	b    [mad.Size]byte
}

// simNode is one engine and what its consumer does: accept every request
// (unless reject is set), establish on every reply, and record events.
type simNode struct {
	net    *simNet
	addr   netip.Addr
	mac    [6]byte
	e      *Engine
	events []Event
	todo   []func()
	reject bool
	// received says, per connection, whether its QP got data (COMM_EST).
	received map[uint32]bool
	repData  []byte
}

func (n *simNode) SendMAD(to *Peer, m mad.MAD) {
	s := simMsg{at: n.net.now + n.net.delay, from: Peer{Addr: n.addr, Local: to.Addr, MAC: n.mac}, to: to.Addr}
	copy(s.b[:], m)
	if i, ok := AttrIndex(m.AttrID()); ok {
		n.net.sent[i]++
	}
	lose, dup := false, false
	if n.net.fault != nil {
		lose, dup = n.net.fault(m)
	}
	n.net.trace = append(n.net.trace, fmt.Sprintf("%v %v→%v %v lose=%v dup=%v", n.net.now, n.addr, to.Addr, m.AttrID(), lose, dup))
	if lose {
		return
	}
	n.net.queue = append(n.net.queue, s)
	if dup {
		s.at += n.net.delay / 2
		n.net.queue = append(n.net.queue, s)
	}
	n.net.maxLen = max(n.net.maxLen, len(n.net.queue))
}

func (n *simNode) Received(id uint32) bool { return n.received[id] }

func (n *simNode) Event(ev *Event) {
	c := *ev
	c.REQ, c.REP, c.Peer = nil, nil, nil
	c.PrivateData = append([]byte(nil), ev.PrivateData...)
	n.events = append(n.events, c)
	id := ev.ID
	switch ev.Type {
	case EventRequest:
		qpn := ev.REQ.LocalQPN() + 0x100
		if n.reject {
			n.todo = append(n.todo, func() { n.e.Reject(n.net.now, id, mad.RejConsumerDefined, nil, []byte("no")) })
			return
		}
		n.todo = append(n.todo, func() {
			if err := n.e.Accept(n.net.now, id, &mad.REPFields{LocalQPN: qpn, StartingPSN: 7, PrivateData: n.repData}); err != nil {
				n.net.t.Errorf("accept: %v", err)
			}
		})
	case EventReply:
		n.todo = append(n.todo, func() {
			if err := n.e.Establish(n.net.now, id, nil); err != nil {
				n.net.t.Errorf("establish: %v", err)
			}
		})
	case EventDisconnectRequest:
		n.todo = append(n.todo, func() { n.e.Disconnect(n.net.now, id, nil) })
	case EventSIDRRequest:
		n.todo = append(n.todo, func() {
			n.e.SIDRReply(n.net.now, id, &mad.SIDRREPFields{QPN: 0x77, QKey: mad.RDMAUDPQKey})
		})
	}
}

func (n *simNode) runTodo() {
	for len(n.todo) > 0 {
		f := n.todo[0]
		n.todo = n.todo[1:]
		f()
	}
}

func (n *simNode) has(t EventType) int {
	k := 0
	for _, e := range n.events {
		if e.Type == t {
			k++
		}
	}
	return k
}

func newSimNet(t testing.TB) *simNet {
	return &simNet{t: t, delay: time.Millisecond, nodes: map[netip.Addr]*simNode{}}
}

func (s *simNet) node(addr string, seed uint64) *simNode {
	a := netip.MustParseAddr(addr)
	n := &simNode{net: s, addr: a, mac: [6]byte{2, 0, 0, 0, 0, byte(len(s.nodes) + 1)}, received: map[uint32]bool{}}
	e, err := NewEngine(Config{GUID: GUID(n.mac), Out: n, Handler: n, Seed: seed})
	if err != nil {
		s.t.Fatal(err)
	}
	n.e = e
	s.nodes[a] = n
	return n
}

// run advances the clock, delivering MADs and firing timers, until
// nothing is left to do or limit passes.
func (s *simNet) run(limit time.Duration) {
	for s.now <= limit {
		for _, n := range s.nodes {
			n.runTodo()
		}
		next := Never
		for _, n := range s.nodes {
			next = min(next, n.e.Poll(s.now))
			n.runTodo()
		}
		for _, m := range s.queue {
			next = min(next, m.at)
		}
		if next == Never {
			return
		}
		s.now = max(s.now, next)
		var keep []simMsg
		q := s.queue
		s.queue = nil
		for _, m := range q {
			if m.at <= s.now {
				if n := s.nodes[m.to]; n != nil {
					n.e.Input(s.now, m.b[:], &m.from)
					n.runTodo()
				}
				continue
			}
			keep = append(keep, m)
		}
		s.queue = append(keep, s.queue...)
	}
}

func (s *simNet) connect(a, b *simNode, data []byte) uint32 {
	s.t.Helper()
	return s.connectWith(a, b, PacketLifeTime, ResponseTimeout, data)
}

func TestConnectDisconnect(t *testing.T) {
	s := newSimNet(t)
	a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
	if err := b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471)); err != nil {
		t.Fatal(err)
	}
	b.repData = []byte("rep data")
	id := s.connect(a, b, []byte("req data"))
	s.run(time.Second)
	if a.e.State(id) != StateEstablished || a.has(EventReply) != 1 || b.has(EventEstablished) != 1 {
		t.Fatalf("not established: a %v %+v, b %+v", a.e.State(id), a.events, b.events)
	}
	if !bytes.HasPrefix(b.events[0].PrivateData, []byte("req data")) || !bytes.HasPrefix(a.events[0].PrivateData, []byte("rep data")) {
		t.Fatalf("private data: REQ %q, REP %q", b.events[0].PrivateData[:8], a.events[0].PrivateData[:8])
	}
	if err := a.e.Disconnect(s.now, id, nil); err != nil {
		t.Fatal(err)
	}
	s.run(time.Minute)
	if a.has(EventDisconnected) != 1 || b.has(EventDisconnectRequest) != 1 || a.has(EventTimewaitExit) != 1 || b.has(EventTimewaitExit) != 1 {
		t.Fatalf("disconnect: a %+v, b %+v", a.events, b.events)
	}
	if a.e.Conns() != 0 || b.e.Conns() != 0 || len(a.e.timers) != 0 || len(b.e.timers) != 0 {
		t.Fatalf("left: %d and %d connections", a.e.Conns(), b.e.Conns())
	}
	if s.sent != [numAttrs]int{1, 0, 0, 1, 1, 1, 1, 0, 0} {
		t.Fatalf("messages sent (REQ MRA REJ REP RTU DREQ DREP SIDR_REQ SIDR_REP) %v, want one each of REQ REP RTU DREQ DREP", s.sent)
	}
}

func TestRejects(t *testing.T) {
	s := newSimNet(t)
	a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
	id := s.connect(a, b, nil)
	s.run(time.Second)
	if a.has(EventRejected) != 1 || a.events[0].Reason != mad.RejInvalidServiceID || a.e.State(id) != StateIdle {
		t.Fatalf("no listener: %+v", a.events)
	}
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	b.reject = true
	a.events = nil
	s.connect(a, b, nil)
	s.run(time.Second)
	if a.has(EventRejected) != 1 || a.events[0].Reason != mad.RejConsumerDefined || !bytes.HasPrefix(a.events[0].PrivateData, []byte("no")) ||
		len(a.events[0].PrivateData) != mad.REJPrivateSize {
		t.Fatalf("consumer reject: %+v", a.events)
	}
	if a.e.Conns() != 0 || b.e.Conns() != 0 {
		t.Fatalf("left: %d and %d connections", a.e.Conns(), b.e.Conns())
	}
}

// TestUnreachable: a REQ nobody answers is sent 1 + Max CM Retries times,
// each try waiting 2·ms(PLT) + ms(response time-out), then the connection
// fails and a REJ "timeout" goes out.
func TestUnreachable(t *testing.T) {
	s := newSimNet(t)
	a := s.node("198.18.0.1", 1)
	ghost := &simNode{addr: netip.MustParseAddr("198.18.0.9")}
	id := s.connect(a, ghost, nil)
	s.run(10 * time.Minute)
	per := 2*ms(PacketLifeTime) + ms(ResponseTimeout)
	if a.has(EventUnreachable) != 1 || a.e.State(id) != StateIdle || s.sent[0] != 1+MaxCMRetries || s.sent[2] != 1 {
		t.Fatalf("events %+v, sent %v", a.events, s.sent)
	}
	if want := per * (1 + MaxCMRetries); s.now < want || s.now > want+s.delay {
		t.Fatalf("gave up at %v, want %v", s.now, want)
	}
}

// TestLossyConnections: two engines over a network that loses or
// duplicates each message type in turn, across seeds: every connection
// ends established on both sides and then disconnected, or failed on the
// active side with the passive side cleaned up; never hung, nothing left.
func TestLossyConnections(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	for _, target := range []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP, 0} {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("%v/%d", target, seed), func(t *testing.T) {
				lossyRun(t, target, seed)
			})
		}
	}
}

func lossyRun(t *testing.T, target mad.AttrID, seed uint64) {
	s := newSimNet(t)
	rng := rand.New(rand.NewPCG(seed, 99))
	s.fault = func(m mad.MAD) (bool, bool) {
		if target != 0 && m.AttrID() != target {
			return false, false
		}
		return rng.Float64() < 0.4, rng.Float64() < 0.3
	}
	a, b := s.node("198.18.0.1", seed+1), s.node("198.18.0.2", seed+1000)
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	id := s.connect(a, b, nil)
	s.run(5 * time.Minute)
	switch a.e.State(id) {
	case StateEstablished:
		if b.has(EventEstablished) != 1 {
			// The RTU was lost every time and the QP got nothing: the
			// passive side must have given up cleanly.
			if b.has(EventUnreachable) != 1 {
				t.Fatalf("a established, b %+v\n%s", b.events, s.traceText())
			}
			return
		}
		if err := a.e.Disconnect(s.now, id, nil); err != nil {
			t.Fatal(err)
		}
		s.run(s.now + 10*time.Minute)
		if a.has(EventDisconnected) != 1 || a.e.Conns() != 0 || b.e.Conns() != 0 {
			t.Fatalf("after disconnect: a %+v (%d left), b %+v (%d left)\n%s", a.events, a.e.Conns(), b.events, b.e.Conns(), s.traceText())
		}
		if b.has(EventDisconnectRequest) != 1 && b.has(EventTimewaitExit) != 1 {
			t.Fatalf("b never let go: %+v", b.events)
		}
	case StateIdle:
		if a.has(EventUnreachable)+a.has(EventRejected) != 1 {
			t.Fatalf("a failed without saying so: %+v", a.events)
		}
		s.run(s.now + 10*time.Minute)
		if b.e.Conns() != 0 {
			t.Fatalf("b kept %d connections: %+v\n%s", b.e.Conns(), b.events, s.traceText())
		}
	default:
		t.Fatalf("a stuck in %v: %+v\n%s", a.e.State(id), a.events, s.traceText())
	}
}

func (s *simNet) traceText() string {
	var b bytes.Buffer
	for _, l := range s.trace {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// TestDuplicateREQGetsMRA: a REQ repeated while the consumer decides gets
// an MRA, which makes the active side wait longer instead of giving up.
func TestDuplicateREQGetsMRA(t *testing.T) {
	s := newSimNet(t)
	a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	var reqID uint32
	slow := &slowNode{simNode: b, held: &reqID}
	b.e.cfg.Handler = slow
	id := s.connect(a, b, nil)
	per := 2*ms(PacketLifeTime) + ms(ResponseTimeout)
	s.run(per + per/2) // one retry of the REQ
	if s.sent[1] != 1 || a.e.State(id) != StateMRAReqRcvd {
		t.Fatalf("after a duplicate REQ: MRAs sent %d, a in %v", s.sent[1], a.e.State(id))
	}
	// The consumer answers a minute later: still in time.
	s.now += time.Minute
	if err := b.e.Accept(s.now, reqID, &mad.REPFields{LocalQPN: 0x99}); err != nil {
		t.Fatal(err)
	}
	s.run(s.now + time.Second)
	if a.e.State(id) != StateEstablished || b.e.State(reqID) != StateEstablished {
		t.Fatalf("a %v, b %v", a.e.State(id), b.e.State(reqID))
	}
}

// slowNode holds requests instead of accepting them.
type slowNode struct {
	*simNode
	held *uint32
}

func (n *slowNode) Event(ev *Event) {
	if ev.Type == EventRequest {
		*n.held = ev.ID
		return
	}
	n.simNode.Event(ev)
}

// TestCrossingDREQs: both sides disconnect at once (ucmatose does); both
// end disconnected and leave time-wait.
func TestCrossingDREQs(t *testing.T) {
	s := newSimNet(t)
	a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	id := s.connect(a, b, nil)
	s.run(time.Second)
	var bid uint32
	for k := range b.e.conns {
		bid = k
	}
	if err := a.e.Disconnect(s.now, id, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.e.Disconnect(s.now, bid, nil); err != nil {
		t.Fatal(err)
	}
	s.run(time.Minute)
	if a.has(EventDisconnected) != 1 || b.has(EventDisconnected) != 1 || a.e.Conns()+b.e.Conns() != 0 {
		t.Fatalf("a %+v, b %+v", a.events, b.events)
	}
	if s.sent[5] != 2 || s.sent[6] != 2 {
		t.Fatalf("DREQs %d, DREPs %d, want 2 and 2", s.sent[5], s.sent[6])
	}
}

// TestStrayMessages: a DREQ for no connection gets a DREP; a REQ repeated
// in time-wait gets REJ "stale connection"; REP, RTU, DREP, MRA and REJ
// for no connection are counted and dropped.
func TestStrayMessages(t *testing.T) {
	s := newSimNet(t)
	a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	from := &Peer{Addr: a.addr, Local: b.addr}
	var m [mad.Size]byte
	mm := mad.MAD(m[:])
	mm.EncodeCM(5, mad.AttrDREQ, 0)
	mad.DREQ(mm.Body()).Encode(&mad.DREQFields{LocalCommID: 1, RemoteCommID: 2, RemoteQPN: 3})
	b.e.Input(0, m[:], from)
	if len(s.queue) != 1 || mad.MAD(s.queue[0].b[:]).AttrID() != mad.AttrDREP {
		t.Fatalf("unknown DREQ answered with %d messages", len(s.queue))
	}
	if d := mad.DREP(mad.MAD(s.queue[0].b[:]).Body()); d.LocalCommID() != 2 || d.RemoteCommID() != 1 || mad.MAD(s.queue[0].b[:]).TID() != 5 {
		t.Fatalf("DREP comm IDs %#x/%#x", d.LocalCommID(), d.RemoteCommID())
	}
	s.queue = nil
	for _, attr := range []mad.AttrID{mad.AttrREP, mad.AttrRTU, mad.AttrDREP, mad.AttrMRA, mad.AttrREJ} {
		mm.EncodeCM(9, attr, 0)
		b.e.Input(0, m[:], from)
	}
	if got := b.e.Stats().RxUnmatched.Load(); got != 6 || len(s.queue) != 0 {
		t.Fatalf("unmatched %d, answers %d", got, len(s.queue))
	}

	// A REQ from the QP of a live connection is stale: REJ 10, and the
	// live connection is sent a DREQ. Once that one is in time-wait, the
	// same QP connects again.
	s.queue = nil
	id := s.connect(a, b, nil)
	var req [mad.Size]byte
	copy(req[:], s.queue[0].b[:])
	s.run(time.Second)
	if a.e.State(id) != StateEstablished {
		t.Fatalf("not established: %v", a.e.State(id))
	}
	r := mad.REQ(mad.MAD(req[:]).Body())
	f := r.Fields()
	f.LocalCommID ^= 0x5a5a5a5a
	r.Encode(&f)
	rejs, dreqs := s.sent[2], s.sent[5]
	b.e.Input(s.now, req[:], &Peer{Addr: a.addr, Local: b.addr, MAC: a.mac})
	if s.sent[2] != rejs+1 || s.sent[5] != dreqs+1 {
		t.Fatalf("stale REQ: %d REJs, %d DREQs", s.sent[2]-rejs, s.sent[5]-dreqs)
	}
	if rej := mad.REJ(mad.MAD(s.queue[len(s.queue)-2].b[:]).Body()); rej.Reason() != mad.RejStaleConn {
		t.Fatalf("REJ reason %v, want stale connection", rej.Reason())
	}
	s.run(s.now + 100*time.Millisecond) // the DREQ answered: both in time-wait
	if a.e.State(id) != StateTimewait {
		t.Fatalf("old connection in %v", a.e.State(id))
	}
	again := s.connect(a, b, nil)
	s.run(s.now + time.Second)
	if a.e.State(again) != StateEstablished {
		t.Fatalf("the same QP again: %v", a.e.State(again))
	}
}

// TestREQFlood: a flood of REQs, each from a new comm ID and QP, holds at
// most Backlog connections; the rest are refused with REJ 3, and nothing
// grows with the flood.
func TestREQFlood(t *testing.T) {
	s := newSimNet(t)
	b := s.node("198.18.0.2", 2)
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	held := uint32(0)
	b.e.cfg.Handler = &slowNode{simNode: b, held: &held}
	var m [mad.Size]byte
	mm := mad.MAD(m[:])
	from := &Peer{Addr: netip.MustParseAddr("198.18.0.66"), Local: b.addr}
	const n = 20000
	for i := range uint32(n) {
		mm.EncodeCM(uint64(i), mad.AttrREQ, 0)
		mad.REQ(mm.Body()).Encode(&mad.REQFields{LocalCommID: i + 1, LocalQPN: i + 0x11, LocalCAGUID: 42, PKey: 0xffff,
			ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471), MaxCMRetries: 15})
		b.e.Input(0, m[:], from)
		s.queue = s.queue[:0]
	}
	if got := b.e.Conns(); got != b.e.cfg.Backlog {
		t.Fatalf("%d connections held, want the backlog %d", got, b.e.cfg.Backlog)
	}
	if got := b.e.Stats().Refused.Load(); got != n-uint64(b.e.cfg.Backlog) {
		t.Fatalf("refused %d", got)
	}
	// The held requests end after what the MRAs promise.
	b.e.Poll(ms(24) + time.Second)
	if b.e.Conns() != 0 {
		t.Fatalf("%d requests never expired", b.e.Conns())
	}
}

// TestJunk: random and mutated MADs never panic and are counted.
func TestJunk(t *testing.T) {
	s := newSimNet(t)
	b := s.node("198.18.0.2", 2)
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	rng := rand.New(rand.NewPCG(1, 2))
	from := &Peer{Addr: netip.MustParseAddr("198.18.0.66"), Local: b.addr}
	var m [mad.Size]byte
	for i := range 100000 {
		for j := range m {
			m[j] = byte(rng.Uint32())
		}
		if i%2 == 0 {
			mad.MAD(m[:]).EncodeCM(rng.Uint64(), mad.AttrID(0x10+rng.IntN(10)), 0)
		}
		b.e.Input(0, m[:rng.IntN(mad.Size+1)], from)
		s.queue = s.queue[:0]
	}
	st := b.e.Stats()
	if st.RxMalformed.Load() == 0 || b.e.Conns() > b.e.cfg.Backlog {
		t.Fatalf("malformed %d, connections %d", st.RxMalformed.Load(), b.e.Conns())
	}
}

// TestSIDR: a SIDR_REQ lost on the way is resent after its time-out and
// answered; a SIDR_REQ for no listener is answered "unsupported"; one
// nobody answers ends unreachable after every retry.
func TestSIDR(t *testing.T) {
	s := newSimNet(t)
	a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
	sid := mad.ServiceID(mad.PortSpaceUDP, 7174)
	lost := 0
	s.fault = func(m mad.MAD) (bool, bool) {
		if m.AttrID() == mad.AttrSIDRREQ && lost == 0 {
			lost++
			return true, false
		}
		return false, false
	}
	b.e.Listen(sid)
	peer := &Peer{Addr: b.addr, Local: a.addr, MAC: b.mac}
	if _, err := a.e.SIDRQuery(s.now, peer, &mad.SIDRREQFields{ServiceID: sid, PKey: 0xffff}, ms(ResponseTimeout), MaxCMRetries); err != nil {
		t.Fatal(err)
	}
	s.run(time.Minute)
	if a.has(EventSIDRReply) != 1 || s.sent[7] != 2 || s.sent[8] != 1 || a.e.Conns()+b.e.Conns() != 0 {
		t.Fatalf("events %+v, sent %v", a.events, s.sent)
	}
	a.events = nil
	a.e.SIDRQuery(s.now, peer, &mad.SIDRREQFields{ServiceID: mad.ServiceID(mad.PortSpaceUDP, 1)}, ms(ResponseTimeout), MaxCMRetries)
	s.run(s.now + time.Minute)
	if a.has(EventSIDRReply) != 1 || a.e.Conns() != 0 {
		t.Fatalf("no listener: %+v", a.events)
	}
	a.events = nil
	ghost := &Peer{Addr: netip.MustParseAddr("198.18.0.9"), Local: a.addr}
	a.e.SIDRQuery(s.now, ghost, &mad.SIDRREQFields{ServiceID: sid}, ms(ResponseTimeout), 3)
	s.run(s.now + time.Minute)
	if a.has(EventUnreachable) != 1 || a.e.Conns() != 0 {
		t.Fatalf("nobody: %+v", a.events)
	}
}

// TestTimewaitNoExhaustion: a peer that opens and closes connections as
// fast as it can, asking for the longest time-outs its REQs can name,
// fills the engine with connections in time-wait; they last MaxTimewait
// at most, and a new connection from anyone (here a good peer, then the
// engine's own dial) takes the place of the oldest instead of being
// refused. State stays within MaxConns throughout.
func TestTimewaitNoExhaustion(t *testing.T) {
	s := newSimNet(t)
	b := s.node("198.18.0.2", 2)
	b.e.cfg.MaxConns = 64
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	evil := &Peer{Addr: netip.MustParseAddr("198.18.0.66"), Local: b.addr, MAC: [6]byte{2, 0, 0, 0, 0, 0x66}}
	var m [mad.Size]byte
	mm := mad.MAD(m[:])
	// Each REQ is accepted at once (simNode), then the attacker sends
	// the RTU and a DREQ; b answers the DREQ and enters time-wait.
	for i := range uint32(1000) {
		mm.EncodeCM(uint64(i), mad.AttrREQ, 0)
		mad.REQ(mm.Body()).Encode(&mad.REQFields{LocalCommID: i + 1, LocalQPN: 0x11 + i, LocalCAGUID: 66,
			ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471), MaxCMRetries: 15, PKey: 0xffff, PathMTU: 3,
			LocalCMResponseTimeout: 31, RemoteCMResponseTimeout: 31, PrimaryLocalACKTimeout: 31})
		b.e.Input(s.now, m[:], evil)
		b.runTodo()
		var rep *conn
		for _, c := range b.e.conns {
			if c.remoteID == i+1 && c.remoteGUID == 66 {
				rep = c
			}
		}
		if rep == nil {
			t.Fatalf("REQ %d: no connection (refused %d)", i, b.e.Stats().Refused.Load())
		}
		mm.EncodeCM(uint64(i), mad.AttrRTU, 0)
		mad.RTU(mm.Body()).Encode(&mad.RTUFields{LocalCommID: i + 1, RemoteCommID: rep.id})
		b.e.Input(s.now, m[:], evil)
		mm.EncodeCM(uint64(i)|1<<40, mad.AttrDREQ, 0)
		mad.DREQ(mm.Body()).Encode(&mad.DREQFields{LocalCommID: i + 1, RemoteCommID: rep.id, RemoteQPN: rep.localQPN})
		b.e.Input(s.now, m[:], evil)
		b.runTodo()
		if st := rep.state; st != StateTimewait {
			t.Fatalf("connection %d in %v after the DREQ, want time-wait", i, st)
		}
		if b.e.Conns() > 64 {
			t.Fatalf("%d connections, more than MaxConns 64", b.e.Conns())
		}
		s.queue = s.queue[:0]
		s.now += time.Millisecond
	}
	if b.e.Stats().Refused.Load() != 0 || b.e.Stats().TimewaitEvicted.Load() == 0 {
		t.Fatalf("refused %d, evicted from time-wait %d: want none refused, room made", b.e.Stats().Refused.Load(),
			b.e.Stats().TimewaitEvicted.Load())
	}
	for _, c := range b.e.conns {
		if c.deadline > s.now+MaxTimewait {
			t.Fatalf("a connection in time-wait until %v, beyond now %v + MaxTimewait", c.deadline, s.now)
		}
	}
	// A good peer connects while the table is full of time-wait.
	a := s.node("198.18.0.1", 1)
	id := s.connect(a, b, nil)
	s.run(s.now + time.Second)
	if a.e.State(id) != StateEstablished {
		t.Fatalf("the good peer's connection is %v, want established (refused %d)", a.e.State(id), b.e.Stats().Refused.Load())
	}
	// And every time-wait ends by MaxTimewait whatever was asked.
	b.e.Poll(s.now + MaxTimewait)
	for _, c := range b.e.conns {
		if c.state == StateTimewait {
			t.Fatalf("a connection still in time-wait after MaxTimewait")
		}
	}
}
