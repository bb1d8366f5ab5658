package cm

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// filter drops the frames a test names, from the pipe's goroutines.
type filter struct {
	mu    sync.Mutex
	drop  func(f *bth.Frame) bool
	f     bth.Frame
	delay time.Duration // every frame's, one way
}

func (x *filter) faults() link.Faults {
	return link.Faults{Delay: x.delay, Drop: func(b []byte) bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.drop == nil || x.f.Decode(b) != nil {
			return false
		}
		return x.drop(&x.f)
	}}
}

func (x *filter) set(drop func(f *bth.Frame) bool) {
	x.mu.Lock()
	x.drop = drop
	x.mu.Unlock()
}

// cmAttr is the CM message a frame carries to QP 1, or 0.
func cmAttr(f *bth.Frame) mad.AttrID {
	if f.BTH.DestQP() != 1 || len(f.Payload) < mad.Size {
		return 0
	}
	return mad.MAD(f.Payload).AttrID()
}

// dropFirst returns a drop function that loses the first n frames that
// match.
func dropFirst(n int, match func(f *bth.Frame) bool) func(f *bth.Frame) bool {
	return func(f *bth.Frame) bool {
		if n > 0 && match(f) {
			n--
			return true
		}
		return false
	}
}

// pair is a connection made through two agents: the client's (A, the
// active side) and the server's (B).
type pair struct {
	aa, ab         *Agent
	client, server *end
	c, s           *Conn
}

// connectPair dials from A to B's listener; before the server accepts,
// it posts nrecv receives of 4 KiB. A test that wants the server's
// Accept itself gets it from accepted instead (with wait false).
func connectPair(t *testing.T, x *filter, cfg AgentConfig, nrecv int, wait bool) (*pair, chan error) {
	t.Helper()
	p := &pair{}
	p.aa, p.ab = pipeAgentsConfig(t, 1, x.faults(), cfg)
	l, err := p.ab.Listen(netip.AddrPortFrom(netip.Addr{}, 7471), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.server, p.client = newEnd(t, p.ab.Device()), newEnd(t, p.aa.Device())
	accepted := make(chan error, 1)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			accepted <- err
			return
		}
		PrepareQP(p.server.qp)
		for i := range nrecv {
			if err := p.server.qp.PostRecv(&roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{p.server.mr.SGE(i*4096, 4096)}}); err != nil {
				accepted <- err
				return
			}
		}
		p.s, err = req.Accept(ctx, p.server.qp, nil)
		accepted <- err
	}()
	if p.c, err = p.aa.Dial(ctx, netip.AddrPortFrom(ipB, 7471), p.client.qp, nil); err != nil {
		t.Fatal(err)
	}
	if wait {
		if err := <-accepted; err != nil {
			t.Fatal(err)
		}
	}
	return p, accepted
}

// sendDREQ makes A's CM send a DREQ with its QP left as it is: the peer
// of the test has sent what it sent, and then disconnects.
func (p *pair) sendDREQ(t *testing.T) {
	t.Helper()
	if err := p.aa.do(func(now time.Duration) error { return p.aa.eng.Disconnect(now, p.c.id, nil) }); err != nil {
		t.Fatal(err)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// state, answering and disconnecting read the agent's engine under its lock.
func (a *Agent) state(id uint32) State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.eng.State(id)
}

func (a *Agent) answering() (int, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.eng.Answering()
}

func (a *Agent) disconnecting() (int, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.eng.Disconnecting()
}

func drepsSent(a *Agent) uint64 {
	i, _ := AttrIndex(mad.AttrDREP)
	return a.Stats().Tx[i].Load()
}

// TestPeerDREQKeepsQP: the peer's DREQ ends the Conn (Done, ErrDisconnected)
// but leaves its QP at RTS, so that the data the peer sent before its DREQ,
// still in flight, completes; the CM flushes nothing and sends no DREP
// until the application's Disconnect, which moves the QP to ERR (flushing
// the receive still posted) and answers.
func TestPeerDREQKeepsQP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x filter
		const n = 8
		p, _ := connectPair(t, &x, AgentConfig{}, n+1, true)
		// The first transmission of every data packet is lost: the data
		// arrives after the DREQ, when the client's QP retransmits it.
		serverQPN := p.server.qp.QPN()
		seen := map[bth.PSN]bool{}
		x.set(func(f *bth.Frame) bool {
			if f.BTH.DestQP() != serverQPN || f.Opcode() == bth.RCAck || seen[f.BTH.PSN()] {
				return false
			}
			seen[f.BTH.PSN()] = true
			return true
		})
		for i := range n {
			p.client.buf[i*4096] = byte(i + 1)
			if err := p.client.qp.PostSend(&roce.SendWR{ID: uint64(i), Opcode: roce.WRSend, Flags: roce.SendSignaled,
				SGL: []roce.SGE{p.client.mr.SGE(i*4096, 4096)}}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		p.sendDREQ(t)
		<-p.s.Done()
		if !errors.Is(p.s.Err(), ErrDisconnected) {
			t.Fatalf("server Err() = %v, want ErrDisconnected", p.s.Err())
		}
		if st := p.server.qp.State(); st != roce.StateRTS {
			t.Fatalf("server QP in %v after the peer's DREQ, want RTS", st)
		}
		if got := p.server.qp.Stats().RecvCompletions; got != 0 {
			t.Fatalf("%d receives completed before the DREQ; the data was to arrive after it", got)
		}
		for i := range n {
			wc := waitWC(t, p.server.cq)
			if wc.Status != roce.WCSuccess || wc.ID != uint64(i) || p.server.buf[i*4096] != byte(i+1) {
				t.Fatalf("receive %d after the DREQ: %v (ID %d, byte %d)", i, wc.Status, wc.ID, p.server.buf[i*4096])
			}
		}
		synctest.Wait()
		var wc [1]roce.WC
		if p.server.cq.Poll(wc[:]) != 0 {
			t.Fatalf("a completion (%v) of the receive still posted before the server's Disconnect", wc[0].Status)
		}
		if got := drepsSent(p.ab); got != 0 {
			t.Fatalf("server sent %d DREPs before its Disconnect, want 0", got)
		}
		if isClosed(p.c.Done()) {
			t.Fatal("the client's disconnect ended before the server answered")
		}
		if err := p.s.Disconnect(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := p.server.qp.State(); st != roce.StateErr {
			t.Fatalf("server QP in %v after its Disconnect, want ERR", st)
		}
		if wc := waitWC(t, p.server.cq); wc.Status != roce.WCWRFlushErr || wc.ID != n {
			t.Fatalf("the receive still posted: %v (ID %d), want flushed", wc.Status, wc.ID)
		}
		<-p.c.Done()
		if p.c.Err() != nil || drepsSent(p.ab) != 1 || p.ab.state(p.s.id) != StateTimewait {
			t.Fatalf("client Err() = %v, server DREPs %d, server in %v", p.c.Err(), drepsSent(p.ab), p.ab.state(p.s.id))
		}
	})
}

// TestCloseAnswersResentDREQ: the server answers the client's DREQ and
// the process closes at once (Agent.Close); the DREP was lost. Close
// keeps the CM answering, so the client's resent DREQ gets a DREP from
// the connection in time-wait, and Close returns after time-wait.
func TestCloseAnswersResentDREQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x filter
		p, _ := connectPair(t, &x, AgentConfig{}, 0, true)
		x.set(dropFirst(1, func(f *bth.Frame) bool { return cmAttr(f) == mad.AttrDREP }))
		disconnected := make(chan error, 1)
		go func() { disconnected <- p.c.Disconnect(context.Background()) }()
		<-p.s.Done()
		if err := p.s.Disconnect(context.Background()); err != nil {
			t.Fatal(err)
		}
		n, until := p.ab.answering()
		if n != 1 {
			t.Fatalf("connections answering in time-wait = %d, want 1", n)
		}
		closed := make(chan struct{})
		go func() {
			p.ab.Close()
			close(closed)
		}()
		// Just before the time-wait ends Close still waits; by then the
		// client's DREQ came again and was answered.
		time.Sleep(until - p.ab.now() - time.Millisecond)
		synctest.Wait()
		if isClosed(closed) {
			t.Fatal("Close returned during time-wait")
		}
		if err := <-disconnected; err != nil {
			t.Fatal(err)
		}
		st := p.aa.Stats()
		if st.Retransmits.Load() != 1 || st.Timeouts.Load() != 0 || drepsSent(p.ab) != 2 || p.ab.Stats().RxDuplicates.Load() != 1 {
			t.Fatalf("client: %d DREQs resent, %d time-outs; server: %d DREPs, %d duplicates; want 1, 0, 2, 1",
				st.Retransmits.Load(), st.Timeouts.Load(), drepsSent(p.ab), p.ab.Stats().RxDuplicates.Load())
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if !isClosed(closed) {
			t.Fatal("Close still waiting after the time-wait ended")
		}
	})
}

// TestCloseWaitBound: AgentConfig.CloseWait bounds Close's wait for
// time-wait; negative means none.
func TestCloseWaitBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x filter
		p, _ := connectPair(t, &x, AgentConfig{CloseWait: -1}, 0, true)
		go p.c.Disconnect(context.Background())
		<-p.s.Done()
		p.s.Disconnect(context.Background())
		if n, _ := p.ab.answering(); n != 1 {
			t.Fatalf("connections answering in time-wait = %d, want 1", n)
		}
		p.ab.Close()
		if n, until := p.ab.answering(); n != 1 || until <= p.ab.now() {
			t.Fatalf("after Close with CloseWait -1: %d connections answering until %v (now %v), want 1 still in time-wait",
				n, until, p.ab.now())
		}
	})
}

// TestAgentCloseAnswersDREQ: a DREQ the application has not answered is
// answered by Agent.Close, which then waits out the time-wait.
func TestAgentCloseAnswersDREQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x filter
		p, _ := connectPair(t, &x, AgentConfig{}, 0, true)
		disconnected := make(chan error, 1)
		go func() { disconnected <- p.c.Disconnect(context.Background()) }()
		<-p.s.Done()
		synctest.Wait()
		if drepsSent(p.ab) != 0 || isClosed(p.c.Done()) {
			t.Fatal("the DREQ was answered before anybody called Disconnect or Close")
		}
		p.ab.Close()
		if err := <-disconnected; err != nil || drepsSent(p.ab) != 1 {
			t.Fatalf("client disconnect %v, server DREPs %d", err, drepsSent(p.ab))
		}
		if n, until := p.ab.answering(); n != 0 && until > p.ab.now() {
			t.Fatalf("Close returned with %d connections in time-wait until %v (now %v)", n, until, p.ab.now())
		}
	})
}

// TestAgentCloseAnswersCrossingDREQ: the server closes its connection
// and its agent at once; its DREQ is lost, and the client's DREQ, sent
// after, crosses it. Close is still waiting for its first DREQ's answer,
// so the client's DREQ gets its DREP (as the kernel's CM answers it from
// time-wait after the process is gone) and the client's disconnect ends
// without a resend or a time-out.
func TestAgentCloseAnswersCrossingDREQ(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x filter
		p, _ := connectPair(t, &x, AgentConfig{}, 0, true)
		x.set(dropFirst(1, func(f *bth.Frame) bool { return cmAttr(f) == mad.AttrDREQ }))
		if err := p.s.Close(); err != nil {
			t.Fatal(err)
		}
		closed := make(chan struct{})
		go func() {
			p.ab.Close()
			close(closed)
		}()
		// The client's DREQ comes later than Close's last sends could
		// take to leave (100 ms) and before the server's DREQ would be
		// resent.
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if isClosed(closed) {
			t.Fatal("Close returned while its DREQ waited for an answer")
		}
		if err := p.c.Disconnect(context.Background()); err != nil {
			t.Fatal(err)
		}
		st := p.aa.Stats()
		if drepsSent(p.ab) != 1 || st.Retransmits.Load() != 0 || st.Timeouts.Load() != 0 {
			t.Fatalf("server sent %d DREPs; client resent %d, timed out %d; want 1, 0, 0",
				drepsSent(p.ab), st.Retransmits.Load(), st.Timeouts.Load())
		}
		<-closed
	})
}

// TestAgentCloseCrossingDREQs: both ends close at once and their DREQs
// cross. Each answers the other's DREQ and gets the DREP to its own, which
// tells it that the peer's DREQ is not resent (it ended when the peer had
// ours): both Closes return then, not after a time-wait that answers
// resends, nor at their DREQ's time-out.
func TestAgentCloseCrossingDREQs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x := filter{delay: 5 * time.Millisecond}
		p, _ := connectPair(t, &x, AgentConfig{}, 0, true)
		p.c.Close()
		p.s.Close()
		_, first := p.ab.disconnecting()
		var wg sync.WaitGroup
		wg.Go(func() { p.aa.Close() })
		wg.Go(func() { p.ab.Close() })
		wg.Wait()
		if now := p.ab.now(); now >= first {
			t.Fatalf("Close returned at %v, not before its DREQ's time-out at %v", now, first)
		}
		for i, a := range []*Agent{p.aa, p.ab} {
			if n, _ := a.answering(); drepsSent(a) != 1 || a.Stats().Retransmits.Load() != 0 || n != 0 {
				t.Errorf("agent %d: %d DREPs sent, %d resends, %d answering; want 1, 0, 0", i, drepsSent(a), a.Stats().Retransmits.Load(), n)
			}
		}
	})
}

// TestAgentCloseDREQUnanswered: a peer that answers no DREQ holds Close
// for the first DREQ's wait, not for all its resends.
func TestAgentCloseDREQUnanswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x filter
		p, _ := connectPair(t, &x, AgentConfig{}, 0, true)
		x.set(func(f *bth.Frame) bool { return cmAttr(f) == mad.AttrDREQ })
		p.s.Close()
		_, first := p.ab.disconnecting()
		p.ab.Close()
		if now := p.ab.now(); now < first || p.ab.Stats().Retransmits.Load() != 1 {
			t.Fatalf("Close returned at %v, its first DREQ waited until %v; %d resent, want 1",
				now, first, p.ab.Stats().Retransmits.Load())
		}
	})
}

// TestLostRTUEstablishedByData: every RTU is lost; the server's Accept
// returns with the client's first packet (COMM_EST), not at the REP's
// time-out, and the REP is never resent.
func TestLostRTUEstablishedByData(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x filter
		x.set(func(f *bth.Frame) bool { return cmAttr(f) == mad.AttrRTU })
		p, accepted := connectPair(t, &x, AgentConfig{}, 1, false)
		synctest.Wait()
		select {
		case err := <-accepted:
			t.Fatalf("Accept returned (%v) without the RTU or data", err)
		default:
		}
		if err := p.client.qp.PostSend(&roce.SendWR{ID: 1, Opcode: roce.WRSend, Flags: roce.SendSignaled,
			SGL: []roce.SGE{p.client.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, p.client.cq); wc.Status != roce.WCSuccess {
			t.Fatalf("send %v", wc.Status)
		}
		synctest.Wait()
		select {
		case err := <-accepted:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Accept still waiting after the first data arrived")
		}
		if st := p.ab.state(p.s.id); st != StateEstablished {
			t.Fatalf("server connection in %v", st)
		}
		if wc := waitWC(t, p.server.cq); wc.Status != roce.WCSuccess {
			t.Fatalf("server receive %v", wc.Status)
		}
		// Long after the REP's time-outs: nothing was resent, the
		// connection is still up.
		time.Sleep(time.Minute)
		if r := p.ab.Stats().Retransmits.Load(); r != 0 || isClosed(p.s.Done()) {
			t.Fatalf("REPs resent %d, server connection ended (%v)", r, p.s.Err())
		}
	})
}

// TestNotify: the engine's COMM_EST establishes a connection whose RTU
// was lost at once, the RTU arriving later is a duplicate, and Notify
// outside REP_SENT does nothing.
func TestNotify(t *testing.T) {
	s := newSimNet(t)
	a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
	b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
	var rtu []byte
	s.fault = func(m mad.MAD) (bool, bool) {
		if m.AttrID() == mad.AttrRTU && rtu == nil {
			rtu = append([]byte(nil), m...)
			return true, false
		}
		return false, false
	}
	id := s.connect(a, b, nil)
	s.run(10 * time.Millisecond)
	var bid uint32
	for k := range b.e.conns {
		bid = k
	}
	if a.e.State(id) != StateEstablished || b.e.State(bid) != StateRepSent {
		t.Fatalf("a in %v, b in %v; want ESTABLISHED, REP_SENT", a.e.State(id), b.e.State(bid))
	}
	if err := b.e.Notify(s.now, bid); err != nil {
		t.Fatal(err)
	}
	if b.e.State(bid) != StateEstablished || b.has(EventEstablished) != 1 || len(b.e.timers) != 0 {
		t.Fatalf("b in %v, events %+v, %d timers", b.e.State(bid), b.events, len(b.e.timers))
	}
	if err := b.e.Notify(s.now, bid); err != nil || b.has(EventEstablished) != 1 {
		t.Fatalf("second Notify: %v, %d established events", err, b.has(EventEstablished))
	}
	if err := b.e.Notify(s.now, 12345); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Notify of no connection: %v", err)
	}
	// The RTU after all: a duplicate, as the kernel's cm_rtu_handler.
	b.e.Input(s.now, rtu, &Peer{Addr: a.addr, Local: b.addr, MAC: a.mac})
	s.run(s.now + time.Minute)
	if b.has(EventEstablished) != 1 || b.e.Stats().Retransmits.Load() != 0 || b.e.Stats().RxDuplicates.Load() != 1 {
		t.Fatalf("b events %+v, retransmits %d", b.events, b.e.Stats().Retransmits.Load())
	}
	a.e.Disconnect(s.now, id, nil)
	s.run(s.now + time.Minute)
	if err := b.e.Notify(s.now, bid); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Notify after the connection ended: %v", err)
	}
}

// TestTimewaitOutlastsResentDREQ: whichever side disconnects, if the DREP
// is lost the DREQ's first resend finds the answering connection still in
// time-wait (a duplicate, answered again), not forgotten, with the
// rdma_cm constants of current Linux and of Linux 6.1.
func TestTimewaitOutlastsResentDREQ(t *testing.T) {
	for _, k := range []struct {
		name          string
		plt, response uint8
	}{{"linux", PacketLifeTime, ResponseTimeout}, {"linux-6.1", 18, 20}} {
		for _, active := range []bool{true, false} {
			name := k.name + "/passive-disconnects"
			if active {
				name = k.name + "/active-disconnects"
			}
			t.Run(name, func(t *testing.T) {
				s := newSimNet(t)
				a, b := s.node("198.18.0.1", 1), s.node("198.18.0.2", 2)
				b.e.Listen(mad.ServiceID(mad.PortSpaceTCP, 7471))
				id := s.connectWith(a, b, k.plt, k.response, nil)
				s.run(time.Second)
				var bid uint32
				for c := range b.e.conns {
					bid = c
				}
				from, to, fid := a, b, id
				if !active {
					from, to, fid = b, a, bid
				}
				dreps := 0
				s.fault = func(m mad.MAD) (bool, bool) {
					if m.AttrID() == mad.AttrDREP {
						dreps++
						return dreps == 1, false
					}
					return false, false
				}
				if err := from.e.Disconnect(s.now, fid, nil); err != nil {
					t.Fatal(err)
				}
				s.run(s.now + 10*time.Minute)
				if from.has(EventDisconnected) != 1 || from.e.Stats().Timeouts.Load() != 0 || from.e.Stats().Retransmits.Load() != 1 {
					t.Fatalf("disconnecting side: events %+v, %d time-outs, %d DREQs resent; want a DREP after one resend",
						from.events, from.e.Stats().Timeouts.Load(), from.e.Stats().Retransmits.Load())
				}
				if st := to.e.Stats(); st.RxDuplicates.Load() != 1 || st.RxUnmatched.Load() != 0 || dreps != 2 {
					t.Fatalf("answering side: %d duplicates, %d unmatched, %d DREPs; want the resent DREQ in time-wait",
						st.RxDuplicates.Load(), st.RxUnmatched.Load(), dreps)
				}
				if a.e.Conns()+b.e.Conns() != 0 {
					t.Fatalf("left: %d and %d connections", a.e.Conns(), b.e.Conns())
				}
			})
		}
	}
}

// connectWith is simNet.connect with the REQ an rdma_cm of packet life
// time plt and CM response time-out response sends.
func (s *simNet) connectWith(a, b *simNode, plt, response uint8, data []byte) uint32 {
	s.t.Helper()
	var priv [mad.REQPrivateSize]byte
	copy(priv[:], data)
	r := ConnectRequest{PacketLifeTime: plt, REQ: mad.REQFields{
		ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471), LocalQPN: 0x11, StartingPSN: 0x123456,
		RemoteCMResponseTimeout: response, LocalCMResponseTimeout: response, MaxCMRetries: MaxCMRetries,
		PathMTU: 3, PKey: 0xffff, RetryCount: 7, RNRRetryCount: 7, PrimaryLocalACKTimeout: ackTimeout(CAAckDelay, plt),
		PrivateData: priv[:],
	}}
	id, err := a.e.Connect(s.now, &Peer{Addr: b.addr, Local: a.addr, MAC: b.mac}, &r)
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

// TestCloseForgetsConn: a Conn closed while established, or after the
// peer's DREQ, leaves the agent's table at once (the engine emits no
// EventTimewaitExit for a destroyed connection, so nothing else would take
// it out): a program that opens and closes connections keeps no memory of
// them.
func TestCloseForgetsConn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var x filter
		p, _ := connectPair(t, &x, AgentConfig{}, 0, true)
		conns := func(a *Agent) int {
			a.mu.Lock()
			defer a.mu.Unlock()
			return len(a.conns)
		}
		if conns(p.aa) != 1 || conns(p.ab) != 1 {
			t.Fatalf("connections %d and %d, want 1 each", conns(p.aa), conns(p.ab))
		}
		p.c.Close() // the client's DREQ; the server is told
		<-p.s.Done()
		p.s.Close() // the server answers with its DREP
		synctest.Wait()
		if conns(p.aa) != 0 || conns(p.ab) != 0 {
			t.Fatalf("after Close: the agents hold %d and %d connections, want none", conns(p.aa), conns(p.ab))
		}
		if st := p.ab.state(p.s.ID()); st != StateTimewait {
			t.Errorf("server's connection in %v after its DREP, want time-wait", st)
		}
	})
}
