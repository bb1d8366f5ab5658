package qp

import (
	"container/heap"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/link"
)

// region is a registered memory region of testMem, with guard bytes on
// both sides that the engine must never touch.
type region struct {
	key   uint32
	base  uint64
	all   []byte // guard | buf | guard
	buf   []byte
	acc   Access
	valid bool
}

const guard = 64

type testMem struct {
	regions map[uint32]*region
	invalid []uint32
}

func newTestMem() *testMem { return &testMem{regions: map[uint32]*region{}} }

func (m *testMem) add(key uint32, base uint64, size int, acc Access) *region {
	all := make([]byte, size+2*guard)
	for i := range all {
		all[i] = 0xA5
	}
	r := &region{key: key, base: base, all: all, buf: all[guard : guard+size : guard+size], acc: acc, valid: true}
	for i := range r.buf {
		r.buf[i] = 0
	}
	m.regions[key] = r
	return r
}

func (r *region) guardsIntact() bool {
	for _, b := range r.all[:guard] {
		if b != 0xA5 {
			return false
		}
	}
	for _, b := range r.all[guard+len(r.buf):] {
		if b != 0xA5 {
			return false
		}
	}
	return true
}

func (m *testMem) lookup(key uint32, addr uint64, n uint32, acc Access) ([]byte, bool) {
	r := m.regions[key]
	if r == nil || !r.valid || r.acc&acc != acc || addr < r.base || addr-r.base > uint64(len(r.buf)) ||
		uint64(n) > uint64(len(r.buf))-(addr-r.base) {
		return nil, false
	}
	o := addr - r.base
	return r.buf[o : o+uint64(n) : o+uint64(n)], true
}

func (m *testMem) Local(k uint32, a uint64, n uint32, acc Access) ([]byte, bool) {
	return m.lookup(k, a, n, acc)
}

func (m *testMem) Remote(k uint32, a uint64, n uint32, acc Access) ([]byte, bool) {
	return m.lookup(k, a, n, acc)
}

func (m *testMem) Invalidate(k uint32) bool {
	r := m.regions[k]
	if r == nil {
		return false
	}
	m.invalid = append(m.invalid, k)
	return true
}

type testCQ struct{ wcs []WC }

func (c *testCQ) Complete(wc *WC) { c.wcs = append(c.wcs, *wc) }

// wire is the simulated network: frames in flight with their arrival time.
type inflight struct {
	at  time.Duration
	seq uint64
	to  int // endpoint index
	b   []byte
}

type faults struct {
	loss, dup, corrupt, reorder float64
	delay                       time.Duration // base one-way delay
	jitter                      time.Duration // extra random delay for reordered frames
}

type flightHeap []inflight

func (h flightHeap) Len() int { return len(h) }
func (h flightHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h flightHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *flightHeap) Push(x any)   { *h = append(*h, x.(inflight)) }
func (h *flightHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type simNet struct {
	rng    *rand.Rand
	f      faults
	now    time.Duration
	flight flightHeap
	seq    uint64
	ends   [2]*simEnd
	sent   int
	dropFn func(from int, b []byte) bool // drops a frame when it returns true

	// Pipe mode: the frames travel over a link.Pipe on a fake clock
	// instead of the wire above.
	pipe  [2]*link.PipeEnd
	epoch time.Time
	rx    [][]byte
	// hold, in pipe mode, sees every frame an end sends before the pipe
	// does; it returns true when it took the frame (to drop or to send
	// later). alarm is a time the test wants a step at (0: none).
	hold  func(from int, b []byte) bool
	alarm time.Duration
}

// usePipe switches the network to a link.Pipe with the given faults.
func (n *simNet) usePipe(seed uint64, atob, btoa link.Faults) {
	n.epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n.pipe[0], n.pipe[1] = link.NewPipe(link.PipeConfig{Seed: seed, MTU: 9000, MaxFrame: MaxFrameLen(MTU4096), Buffers: 4096,
		AtoB: atob, BtoA: btoa, Clock: func() time.Time { return n.epoch.Add(n.now) }})
	n.rx = make([][]byte, 64)
}

// pipeStep is step in pipe mode.
func (n *simNet) pipeStep() bool {
	for i, end := range n.ends {
		for {
			got, _ := n.pipe[i].Receive(n.rx, 0)
			if got == 0 {
				break
			}
			end.e.Input(n.rx[:got], n.now)
			n.pipe[i].Release(n.rx[:got])
		}
	}
	next := Never
	for i, end := range n.ends {
		if d := end.e.Poll(n.now); d < next {
			next = d
		}
		if len(end.tx) > 0 {
			n.sent += len(end.tx)
			if n.hold != nil {
				end.tx = slices.DeleteFunc(end.tx, func(b []byte) bool { return n.hold(i, b) })
			}
			n.pipe[i].Transmit(end.tx)
			end.tx = end.tx[:0]
		}
	}
	for _, p := range n.pipe {
		if at, ok := p.NextDelivery(); ok {
			next = min(next, at.Sub(n.epoch))
		}
	}
	if n.alarm > n.now {
		next = min(next, n.alarm)
	}
	if next == Never {
		return false
	}
	n.now = max(next, n.now+time.Nanosecond)
	return true
}

// simEnd is one side: an engine with its output.
type simEnd struct {
	net  *simNet
	idx  int
	e    *Engine
	free [][]byte
	mem  *testMem
	tx   [][]byte // pipe mode: frames to transmit after Poll
	one  [][]byte
}

const bufSize = 4096 + 256

func (s *simEnd) Alloc() []byte {
	if p := s.net.pipe[s.idx]; p != nil {
		if s.one == nil {
			s.one = make([][]byte, 1)
		}
		if p.Alloc(s.one) == 0 {
			return nil
		}
		return s.one[0]
	}
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		return b[:cap(b)]
	}
	return make([]byte, bufSize)
}

func (s *simEnd) Send(b []byte) {
	n := s.net
	if n.pipe[s.idx] != nil {
		s.tx = append(s.tx, b)
		return
	}
	n.sent++
	to := 1 - s.idx
	if n.f.loss > 0 && n.rng.Float64() < n.f.loss || n.dropFn != nil && n.dropFn(s.idx, b) {
		s.free = append(s.free, b)
		return
	}
	at := n.now + n.f.delay
	if n.f.reorder > 0 && n.rng.Float64() < n.f.reorder {
		at += time.Duration(n.rng.Int64N(int64(n.f.jitter) + 1))
	}
	if n.f.corrupt > 0 && n.rng.Float64() < n.f.corrupt {
		b[n.rng.IntN(len(b))] ^= byte(1 + n.rng.IntN(255))
	}
	if n.f.dup > 0 && n.rng.Float64() < n.f.dup {
		c := n.ends[to].Alloc()[:len(b)]
		copy(c, b)
		n.seq++
		heap.Push(&n.flight, inflight{at: at + time.Duration(n.rng.Int64N(int64(n.f.jitter)+1)), seq: n.seq, to: to, b: c})
	}
	n.seq++
	heap.Push(&n.flight, inflight{at: at, seq: n.seq, to: to, b: b})
}

var (
	ipA     = netip.MustParseAddr("198.18.0.1")
	ipB     = netip.MustParseAddr("198.18.0.2")
	simIPs  = [2]netip.Addr{ipA, ipB}
	simMACs = [2][6]byte{{2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}}
)

// simAV is the address vector from side i to the other side.
func simAV(i int) AddressVector {
	return AddressVector{SrcMAC: simMACs[i], DstMAC: simMACs[1-i], SrcIP: simIPs[i], DstIP: simIPs[1-i], HopLimit: 64}
}

func newSimNet(t testing.TB, seed uint64, f faults) *simNet { return newSimNetMTU(t, seed, f, 0) }

func newSimNetMTU(t testing.TB, seed uint64, f faults, mtu MTU) *simNet {
	n := &simNet{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), f: f}
	for i := range n.ends {
		end := &simEnd{net: n, idx: i, mem: newTestMem()}
		ip := simIPs[i]
		e, err := NewEngine(EngineConfig{Out: end, LocalIPs: []netip.Addr{ip}, PortMTU: mtu})
		if err != nil {
			t.Fatal(err)
		}
		end.e = e
		n.ends[i] = end
	}
	return n
}

// step delivers what has arrived by now, polls both engines and advances
// the clock to the next event. It returns false when nothing at all is
// scheduled (a hang, unless the test is done).
func (n *simNet) step() bool {
	if n.pipe[0] != nil {
		return n.pipeStep()
	}
	var batch [2][][]byte
	for len(n.flight) > 0 && n.flight[0].at <= n.now {
		x := heap.Pop(&n.flight).(inflight)
		batch[x.to] = append(batch[x.to], x.b)
	}
	next := Never
	for i, end := range n.ends {
		if len(batch[i]) > 0 {
			end.e.Input(batch[i], n.now)
			end.free = append(end.free, batch[i]...)
		}
	}
	for _, end := range n.ends {
		if d := end.e.Poll(n.now); d < next {
			next = d
		}
	}
	if len(n.flight) > 0 {
		next = min(next, n.flight[0].at)
	}
	if next == Never {
		return false
	}
	if next <= n.now {
		next = n.now + time.Nanosecond
	}
	n.now = next
	return true
}

// connect creates a connected pair of QPs of type typ, one per side.
func connect(t testing.TB, n *simNet, typ Type, psnA, psnB uint32, mtu MTU, tune func(*Attr)) (a, b *QP, cqs [4]*testCQ) {
	return connectWith(t, n, typ, [2]uint32{0x100, 0x101}, psnA, psnB, mtu, tune, [2]*SRQ{}, nil)
}

// connectWith is connect with chosen QP numbers, SRQs and receive CQs
// (nil: new ones).
func connectWith(t testing.TB, n *simNet, typ Type, qpns [2]uint32, psnA, psnB uint32, mtu MTU, tune func(*Attr), srq [2]*SRQ, rcqs []*testCQ) (a, b *QP, cqs [4]*testCQ) {
	var qps [2]*QP
	for i, end := range n.ends {
		scq, rcq := &testCQ{}, &testCQ{}
		if rcqs != nil && rcqs[i] != nil {
			rcq = rcqs[i]
		}
		cqs[2*i], cqs[2*i+1] = scq, rcq
		q, err := end.e.CreateQP(Config{Type: typ, QPN: qpns[i], SendCQ: scq, RecvCQ: rcq, Mem: end.mem,
			MaxSendWR: 256, MaxRecvWR: 256, MaxSGE: 4, MaxInline: 256, SRQ: srq[i]})
		if err != nil {
			t.Fatal(err)
		}
		qps[i] = q
	}
	psns := [2]uint32{psnA, psnB}
	for i, q := range qps {
		j := 1 - i
		at := Attr{State: StateInit, PKey: 0xffff, Port: 1, QKey: 0x11111111,
			AccessFlags: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}
		m := AttrState | AttrPKey | AttrPort | AttrAccessFlags
		if typ == UD {
			m = AttrState | AttrPKey | AttrPort | AttrQKey
		}
		if err := q.Modify(&at, m); err != nil {
			t.Fatal(err)
		}
		at = Attr{State: StateRTR, PathMTU: mtu, DestQPN: qps[j].QPN(), RQPSN: bthPSN(psns[j]), MaxDestRdAtomic: 16, MinRNRTimer: 1,
			AV: simAV(i)}
		m = AttrState | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer | AttrAV
		switch typ {
		case UC:
			m = AttrState | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrAV
		case UD:
			m = AttrState
		}
		if tune != nil {
			tune(&at)
		}
		if err := q.Modify(&at, m); err != nil {
			t.Fatal(err)
		}
		at = Attr{State: StateRTS, SQPSN: bthPSN(psns[i]), Timeout: 8, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 8}
		m = AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic
		if typ != RC {
			m = AttrState | AttrSQPSN
		}
		if tune != nil {
			tune(&at)
		}
		if err := q.Modify(&at, m); err != nil {
			t.Fatal(err)
		}
	}
	return qps[0], qps[1], cqs
}

func bthPSN(v uint32) bth.PSN { return bth.PSN(v) }
