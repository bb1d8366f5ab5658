// Package ccsim simulates RoCE v2 congestion control end to end, on a fake
// clock: several sender hosts, each an xroce qp.Engine with one RC QP,
// write to one receiver host through a switch whose port towards the
// receiver is the bottleneck. That port queues and marks CE at dequeue
// as a DCQCN switch does (RED on the instantaneous queue: no mark below
// Kmin bytes, probability rising linearly to Pmax at Kmax, every packet
// above; CC.md §6 after the hpcc simulator), and drops what overflows its
// buffer. The receiver's engine answers CE with CNPs, the senders' DCQCN
// cuts and recovers their rates, their pacers send at them: the whole
// loop is the engines' own code, with nothing mocked but the wires.
//
// Every host has a link to the switch at the line rate, in both
// directions, each a FIFO port serializing frames (24 bytes of preamble,
// FCS and gap added) with a propagation delay. The simulation is
// deterministic: the same Config gives the same Result.
//
// Tests assert fairness (Jain's index), bounded queues and no loss; the
// ccplot command draws the figures of docs/congestion.md from the same runs.
package ccsim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/qp"
)

// Marking is a RED/DCTCP-style marking profile for a port: the
// probability of marking CE a packet that leaves while q bytes stay
// queued behind it.
type Marking struct {
	Kmin, Kmax int     // bytes
	Pmax       float64 // probability at Kmax
}

// prob returns the marking probability for queue q.
func (m *Marking) prob(q int) float64 {
	switch {
	case m.Kmax == 0 || q <= m.Kmin:
		return 0
	case q > m.Kmax:
		return 1
	}
	return m.Pmax * float64(q-m.Kmin) / float64(m.Kmax-m.Kmin)
}

// Flow is one sender: an RC QP that writes Message bytes at a time to its
// own QP on the receiver, keeping Depth writes outstanding, from Start to
// Stop (0: the end).
type Flow struct {
	Start, Stop time.Duration
}

// Config describes a simulation.
type Config struct {
	Flows    []Flow
	Duration time.Duration
	// LineRate is every link's rate in bits/s (the bottleneck's too: the
	// senders together offer len(Flows) times what it carries).
	LineRate int64
	// Delay is each link's propagation delay (one way: host to switch or
	// switch to host).
	Delay time.Duration
	// Buffer is the bottleneck port's buffer in bytes: frames that find
	// it full are dropped.
	Buffer int
	Mark   Marking
	// MTU is the QPs' path MTU; Message and Depth the size and number of
	// outstanding RDMA WRITEs per flow.
	MTU     qp.MTU
	Message int
	Depth   int
	// CC is the hosts' congestion control (their qp.EngineConfig.CC).
	CC qp.CCConfig
	// Window is the length of the windows rates and queue are averaged
	// over in Result.
	Window time.Duration
	Seed   uint64
}

// Defaults fills in what c leaves zero: 10 Gb/s links, 1 µs delays, a
// 1 MB buffer, marking at 40 KB..160 KB up to 20% (hpcc's 25 Gb/s profile
// scaled to 10 Gb/s), MTU 1024, 64 KiB writes 4 deep, 100 µs windows.
func (c Config) Defaults() Config {
	if c.LineRate == 0 {
		c.LineRate = 10_000_000_000
	}
	if c.Delay == 0 {
		c.Delay = time.Microsecond
	}
	if c.Buffer == 0 {
		c.Buffer = 2_000_000
	}
	if c.Mark == (Marking{}) {
		c.Mark = Marking{Kmin: 40_000, Kmax: 160_000, Pmax: 0.2}
	}
	if c.MTU == 0 {
		c.MTU = qp.MTU1024
	}
	if c.Message == 0 {
		c.Message = 64 << 10
	}
	if c.Depth == 0 {
		c.Depth = 4
	}
	if c.Window == 0 {
		c.Window = 100 * time.Microsecond
	}
	return c
}

// Result is what a simulation measured.
type Result struct {
	Config Config
	// Per window: the goodput of each flow at the receiver (bits/s of
	// data frames, headers included), each sender's paced rate at the
	// window's end (bits/s, 0 when unlimited), and the bottleneck
	// queue's time average and maximum (bytes).
	Times    []time.Duration // window ends
	Goodput  [][]float64     // [window][flow]
	Rate     [][]float64     // [window][flow]
	QueueAvg []float64
	QueueMax []int
	// Totals.
	Dropped     int    // frames the bottleneck dropped
	Marked      int    // frames it marked CE
	Retransmits uint64 // the senders' go-back-N restarts
	CNPs        uint64 // CNPs the receiver sent
	Completed   []int  // writes completed per flow
	Errors      int    // failed completions
}

// host is one engine with its output and memory.
type host struct {
	s    *sim
	e    *qp.Engine
	ip   netip.Addr
	mac  [6]byte
	up   *port // towards the switch
	down *port // the switch's port towards this host
	tx   [][]byte
	mem  *memory
	gen  uint64 // the poll event that is current
	next time.Duration
}

// Alloc implements qp.Output.
func (h *host) Alloc() []byte { return h.s.alloc() }

// Send implements qp.Output.
func (h *host) Send(b []byte) { h.tx = append(h.tx, b) }

// port is a FIFO link end: frames queue, then leave one at a time at the
// port's rate and arrive after its delay.
type port struct {
	s      *sim
	rate   int64
	delay  time.Duration
	buffer int      // bytes; 0 = unlimited
	mark   *Marking // nil: never marks
	q      [][]byte
	qhead  int
	bytes  int  // queued, not counting the frame on the wire
	busy   bool // a frame is on the wire
	to     func(b []byte)
	// Bottleneck statistics, per window.
	area    float64 // byte·ns of queue since the window began
	areaAt  time.Duration
	maxQ    int
	dropped int
	marked  int
}

// flow is a sender and its state.
type flow struct {
	cfg    Flow
	h      *host
	q      *qp.QP
	rq     *qp.QP
	cq     *countCQ
	posted int
	bytes  int64 // data bytes of its frames delivered to the receiver this window
}

type countCQ struct{ ok, bad int }

func (c *countCQ) Complete(wc *qp.WC) {
	if wc.Status == qp.WCSuccess {
		c.ok++
	} else {
		c.bad++
	}
}

// event kinds
const (
	evPoll = iota
	evDone // a port finished sending its frame
	evArrive
)

type event struct {
	at   time.Duration
	seq  uint64
	kind int
	h    *host
	p    *port
	gen  uint64
	b    []byte
}

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type sim struct {
	cfg    Config
	now    time.Duration
	ev     events
	seq    uint64
	rng    *rand.Rand
	free   [][]byte
	frame  int
	rx     *host
	flows  []*flow
	hosts  []*host
	neck   *port
	dirty  []*host
	byMAC  map[[6]byte]*host
	decode bth.Frame
}

func (s *sim) alloc() []byte {
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b[:cap(b)]
	}
	return make([]byte, s.frame)
}

func (s *sim) release(b []byte) { s.free = append(s.free, b) }

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.ev, e)
}

// wire returns the time b takes on a link of the port's rate.
func (p *port) wire(n int) time.Duration {
	return time.Duration(int64(n+24) * 8 * int64(time.Second) / p.rate)
}

// enqueue takes a frame into the port.
func (p *port) enqueue(b []byte) {
	if p.buffer > 0 && p.bytes+len(b) > p.buffer {
		p.dropped++
		p.s.release(b)
		return
	}
	p.account()
	p.q = append(p.q, b)
	p.bytes += len(b)
	p.maxQ = max(p.maxQ, p.bytes)
	if !p.busy {
		p.startNext()
	}
}

// account adds the queue's byte·time since the last change.
func (p *port) account() {
	now := p.s.now
	p.area += float64(p.bytes) * float64(now-p.areaAt)
	p.areaAt = now
}

// startNext dequeues the head frame, marks it by the queue behind it and
// puts it on the wire.
func (p *port) startNext() {
	if p.qhead == len(p.q) {
		p.q, p.qhead = p.q[:0], 0
		p.busy = false
		return
	}
	p.account()
	b := p.q[p.qhead]
	p.q[p.qhead] = nil
	p.qhead++
	p.bytes -= len(b)
	if p.mark != nil {
		if pr := p.mark.prob(p.bytes); pr > 0 && p.s.rng.Float64() < pr && bth.MarkCE(b) {
			p.marked++
		}
	}
	p.busy = true
	p.s.push(event{at: p.s.now + p.wire(len(b)), kind: evDone, p: p, b: b})
}

// Run simulates cfg.
func Run(cfg Config) (*Result, error) {
	cfg = cfg.Defaults()
	s, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	return s.run(), nil
}

// newSim builds the hosts, links and QPs of cfg.
func newSim(cfg Config) (*sim, error) {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0xcc)), byMAC: map[[6]byte]*host{}}
	s.frame = qp.MaxFrameLen(cfg.MTU)
	mk := func(i int, ip netip.Addr) (*host, error) {
		h := &host{s: s, ip: ip, mac: [6]byte{2, 0, 0, 0, byte(i >> 8), byte(i)}, mem: newMemory(), next: qp.Never}
		e, err := qp.NewEngine(qp.EngineConfig{Out: h, LocalIPs: []netip.Addr{ip}, PortMTU: cfg.MTU, LineRate: cfg.LineRate, CC: cfg.CC})
		if err != nil {
			return nil, err
		}
		h.e = e
		h.up = &port{s: s, rate: cfg.LineRate, delay: cfg.Delay}
		h.down = &port{s: s, rate: cfg.LineRate, delay: cfg.Delay}
		h.up.to = func(b []byte) { s.toSwitch(b) }
		h.down.to = func(b []byte) { s.deliver(h, b) }
		s.byMAC[h.mac] = h
		s.hosts = append(s.hosts, h)
		return h, nil
	}
	rx, err := mk(0, netip.AddrFrom4([4]byte{198, 18, 0, 1}))
	if err != nil {
		return nil, err
	}
	s.rx = rx
	s.neck = rx.down
	s.neck.buffer, s.neck.mark = cfg.Buffer, &cfg.Mark
	for i, fc := range cfg.Flows {
		h, err := mk(i+1, netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}))
		if err != nil {
			return nil, err
		}
		f := &flow{cfg: fc, h: h, cq: &countCQ{}}
		if err := s.connect(f, i); err != nil {
			return nil, err
		}
		s.flows = append(s.flows, f)
	}
	for _, h := range s.hosts {
		s.schedulePoll(h, 0)
	}
	for _, f := range s.flows {
		s.schedulePoll(f.h, f.cfg.Start)
		if f.cfg.Stop > 0 {
			s.schedulePoll(f.h, f.cfg.Stop)
		}
	}
	return s, nil
}

// run runs the simulation to its end, window by window.
func (s *sim) run() *Result {
	cfg := s.cfg
	res := &Result{Config: cfg, Completed: make([]int, len(s.flows))}
	win := cfg.Window
	for end := win; end <= cfg.Duration; end += win {
		s.runUntil(end)
		s.neck.account()
		res.Times = append(res.Times, end)
		gp := make([]float64, len(s.flows))
		rt := make([]float64, len(s.flows))
		for i, f := range s.flows {
			gp[i] = float64(f.bytes) * 8 / win.Seconds()
			f.bytes = 0
			rt[i] = float64(f.q.Stats().Rate.Load())
		}
		res.Goodput = append(res.Goodput, gp)
		res.Rate = append(res.Rate, rt)
		res.QueueAvg = append(res.QueueAvg, s.neck.area/float64(win))
		res.QueueMax = append(res.QueueMax, s.neck.maxQ)
		s.neck.area, s.neck.maxQ = 0, s.neck.bytes
	}
	res.Dropped, res.Marked = s.neck.dropped, s.neck.marked
	for i, f := range s.flows {
		res.Retransmits += f.q.Stats().Retransmits.Load()
		res.Completed[i] = f.cq.ok
		res.Errors += f.cq.bad
	}
	res.CNPs = s.rx.e.Stats().TxCNP.Load()
	return res
}

// connect makes flow i's QP pair: sender QP 0x100+i, receiver QP 0x200+i.
func (s *sim) connect(f *flow, i int) error {
	cfg := s.cfg
	f.h.mem.add(1, 0x1000, cfg.Message)
	s.rx.mem.add(uint32(0x100+i), 0x100000, cfg.Message)
	var err error
	f.q, err = f.h.e.CreateQP(qp.Config{Type: qp.RC, QPN: uint32(0x100 + i), SendCQ: f.cq, RecvCQ: f.cq, Mem: f.h.mem, MaxSendWR: cfg.Depth})
	if err != nil {
		return err
	}
	rcq := &countCQ{}
	f.rq, err = s.rx.e.CreateQP(qp.Config{Type: qp.RC, QPN: uint32(0x200 + i), SendCQ: rcq, RecvCQ: rcq, Mem: s.rx.mem})
	if err != nil {
		return err
	}
	up := func(q *qp.QP, self, peer *host, dest uint32) error {
		av := qp.AddressVector{SrcMAC: self.mac, DstMAC: peer.mac, SrcIP: self.ip, DstIP: peer.ip, HopLimit: 64}
		for _, st := range []struct {
			a qp.Attr
			m qp.AttrMask
		}{
			{qp.Attr{State: qp.StateInit, PKey: 0xffff, Port: 1, AccessFlags: qp.AccessRemoteWrite}, qp.AttrPKey | qp.AttrPort | qp.AttrAccessFlags},
			{qp.Attr{State: qp.StateRTR, AV: av, PathMTU: cfg.MTU, DestQPN: dest, RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 1},
				qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
			{qp.Attr{State: qp.StateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic},
		} {
			if err := q.Modify(&st.a, qp.AttrState|st.m); err != nil {
				return fmt.Errorf("ccsim: flow %d: %w", i, err)
			}
		}
		return nil
	}
	if err := up(f.q, f.h, s.rx, f.rq.QPN()); err != nil {
		return err
	}
	return up(f.rq, s.rx, f.h, f.q.QPN())
}

// toSwitch forwards a frame that reached the switch to the port of its
// destination MAC.
func (s *sim) toSwitch(b []byte) {
	h := s.byMAC[[6]byte(b[0:6])]
	if h == nil {
		s.release(b)
		return
	}
	h.down.enqueue(b)
}

// deliver gives a frame to its host's engine.
func (s *sim) deliver(h *host, b []byte) {
	if h == s.rx && s.decode.Decode(b) == nil && s.decode.Opcode() != bth.OpCNP {
		if qpn := s.decode.BTH.DestQP(); qpn >= 0x200 && int(qpn-0x200) < len(s.flows) {
			s.flows[qpn-0x200].bytes += int64(len(b))
		}
	}
	h.e.Input([][]byte{b}, s.now)
	s.release(b)
	s.markDirty(h)
}

func (s *sim) markDirty(h *host) {
	for _, d := range s.dirty {
		if d == h {
			return
		}
	}
	s.dirty = append(s.dirty, h)
}

func (s *sim) schedulePoll(h *host, at time.Duration) {
	s.push(event{at: at, kind: evPoll, h: h})
}

// runUntil processes the events up to end.
func (s *sim) runUntil(end time.Duration) {
	for len(s.ev) > 0 && s.ev[0].at <= end {
		e := heap.Pop(&s.ev).(event)
		s.now = e.at
		switch e.kind {
		case evPoll:
			if e.gen == e.h.gen {
				e.h.next = qp.Never
			}
			if e.gen == 0 || e.gen == e.h.gen {
				s.markDirty(e.h)
			}
		case evDone:
			p := e.p
			b := e.b
			s.push(event{at: s.now + p.delay, kind: evArrive, p: p, b: b})
			p.startNext()
		case evArrive:
			e.p.to(e.b)
		}
		if len(s.ev) == 0 || s.ev[0].at > s.now {
			s.pollDirty()
		}
	}
	s.now = end
}

// pollDirty polls the hosts that took frames or whose deadline came, keeps
// the flows' send queues full and sends what the engines made.
func (s *sim) pollDirty() {
	for len(s.dirty) > 0 {
		h := s.dirty[0]
		s.dirty = s.dirty[1:]
		for {
			d := h.e.Poll(s.now)
			if !s.topUp(h) {
				h.schedule(d)
				break
			}
		}
		for _, b := range h.tx {
			h.up.enqueue(b)
		}
		clear(h.tx)
		h.tx = h.tx[:0]
	}
}

// schedule arms h's poll at its engine's deadline d.
func (h *host) schedule(d time.Duration) {
	if d == qp.Never || d == h.next {
		return // none, or that poll is already on its way
	}
	h.gen++
	h.next = d
	h.s.push(event{at: max(d, h.s.now), kind: evPoll, h: h, gen: h.gen})
}

// topUp posts writes for h's flow while it is on; it reports whether it
// posted any.
func (s *sim) topUp(h *host) bool {
	posted := false
	for _, f := range s.flows {
		if f.h != h || s.now < f.cfg.Start || f.cfg.Stop > 0 && s.now >= f.cfg.Stop {
			continue
		}
		for f.q.SendQueued() < s.cfg.Depth {
			wr := qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGL: []qp.SGE{{Addr: 0x1000, Length: uint32(s.cfg.Message), LKey: 1}},
				RemoteAddr: 0x100000, RKey: uint32(0x100 + s.index(f))}
			if f.q.PostSend(&wr) != nil {
				break
			}
			f.posted++
			posted = true
		}
	}
	return posted
}

func (s *sim) index(f *flow) int {
	for i, g := range s.flows {
		if g == f {
			return i
		}
	}
	return -1
}

// memory is a qp.Memory of plain regions.
type memory struct{ r map[uint32]region }

type region struct {
	base uint64
	b    []byte
}

func newMemory() *memory { return &memory{r: map[uint32]region{}} }

func (m *memory) add(key uint32, base uint64, n int) { m.r[key] = region{base, make([]byte, n)} }

func (m *memory) get(key uint32, addr uint64, n uint32) ([]byte, bool) {
	r, ok := m.r[key]
	if !ok || addr < r.base || addr-r.base+uint64(n) > uint64(len(r.b)) {
		return nil, false
	}
	o := addr - r.base
	return r.b[o : o+uint64(n)], true
}

func (m *memory) Local(k uint32, a uint64, n uint32, _ qp.Access) ([]byte, bool) {
	return m.get(k, a, n)
}

func (m *memory) Remote(k uint32, a uint64, n uint32, _ qp.Access) ([]byte, bool) {
	return m.get(k, a, n)
}

func (m *memory) Invalidate(uint32) bool { return false }

// Jain returns Jain's fairness index of xs: (Σx)²/(n·Σx²), 1 when all are
// equal, 1/n when one has everything.
func Jain(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// Mean returns each flow's mean goodput, and the bottleneck queue's mean
// and maximum, over the windows that end in (from, to].
func (r *Result) Mean(from, to time.Duration) (goodput []float64, queue float64, queueMax int) {
	n := 0
	for w, end := range r.Times {
		if end <= from || end > to {
			continue
		}
		if goodput == nil {
			goodput = make([]float64, len(r.Goodput[w]))
		}
		for i, g := range r.Goodput[w] {
			goodput[i] += g
		}
		queue += r.QueueAvg[w]
		queueMax = max(queueMax, r.QueueMax[w])
		n++
	}
	for i := range goodput {
		goodput[i] /= float64(n)
	}
	if n > 0 {
		queue /= float64(n)
	}
	return goodput, queue, queueMax
}
