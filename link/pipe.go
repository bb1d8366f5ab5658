package link

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrPeerClosed is returned by Transmit on a pipe end whose other end was
// closed: the cable is unplugged, nothing can be sent any more.
var ErrPeerClosed = errors.New("pipe: peer end closed")

// Faults describes what happens to the frames one end of a pipe sends. The
// zero value is a perfect, instantaneous wire. Each probability applies to
// each frame independently; all random choices come from the pipe's seeded
// generator, so a pipe with the same configuration and seed that is given
// the same frames at the same (Clock) times delivers the same frames, with
// the same damage, at the same times.
type Faults struct {
	Loss      float64 // probability that a frame is lost
	Duplicate float64 // probability that a frame is delivered twice
	Corrupt   float64 // probability that one random bit of a frame is flipped
	Reorder   float64 // probability that a frame is held back until ReorderGap later frames have overtaken it

	// ReorderGap is how many later frames overtake a reordered one; 0 = 1.
	ReorderGap int
	// ReorderTimeout bounds how long a reordered frame waits for later
	// frames to overtake it before it is delivered anyway; 0 = 1 ms.
	ReorderTimeout time.Duration

	// Delay is added to every frame's delivery time; Jitter adds a uniformly
	// random amount in [-Jitter, +Jitter] (the total is never below 0).
	// Jitter may reorder frames, as it does on a real network.
	Delay, Jitter time.Duration

	// Rate is the wire's bit rate in bits/s; 0 = unlimited. With a rate,
	// frames are serialized one after another: a frame of n bytes occupies
	// the wire for (n+RateOverhead)*8/Rate seconds and is delivered (plus
	// Delay) when its last bit has been sent.
	Rate int64
	// RateOverhead is added to each frame's length for Rate, in bytes (24
	// stands for Ethernet's preamble, FCS and inter-frame gap); 0 = none.
	RateOverhead int
	// MaxQueueDelay, with Rate, drops a frame (counted as "overflow") that
	// would have to wait longer than this for the wire: a full transmit
	// queue. 0 = no limit (the receiver's free buffers still bound it).
	MaxQueueDelay time.Duration

	// Drop, if set, is called with every frame before the random faults;
	// the frame is dropped (counted as "filtered") when it returns true.
	// It lets a test drop exactly the frames it wants. It runs with the
	// pipe locked and must not call the pipe.
	Drop func(frame []byte) bool
}

// validate checks that f makes sense.
func (f *Faults) validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", f.Loss}, {"duplicate", f.Duplicate}, {"corrupt", f.Corrupt}, {"reorder", f.Reorder}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("pipe: %s probability %v not in [0, 1]", p.name, p.v)
		}
	}
	if f.Delay < 0 || f.Jitter < 0 || f.ReorderTimeout < 0 || f.MaxQueueDelay < 0 {
		return fmt.Errorf("pipe: negative duration in %+v", *f)
	}
	if f.Rate < 0 || f.RateOverhead < 0 || f.ReorderGap < 0 {
		return fmt.Errorf("pipe: negative rate, overhead or gap in %+v", *f)
	}
	return nil
}

// PipeConfig configures NewPipe. The zero value is a perfect pipe with a
// 1500-byte MTU and 512 buffers per end, on the real clock.
type PipeConfig struct {
	Name     string // ends are named Name+"-a" and Name+"-b"; "" = "pipe"
	MTU      int    // reported MTU (IP packet size); 0 = 1500
	MaxFrame int    // largest frame and buffer size; 0 = MTU + 18 (Ethernet header and one 802.1Q tag)
	Buffers  int    // buffers per end, shared by its transmit and receive sides; 0 = 512

	// Seed seeds the pseudo-random generators (PCG) of both directions.
	Seed uint64
	// AtoB applies to frames end a sends, BtoA to frames end b sends.
	AtoB, BtoA Faults

	// Clock tells the time for delays and rates; nil = time.Now. With a
	// Clock, a waiting Receive does not notice the clock advancing: drive
	// the pipe with Receive(bufs, 0) and NextDelivery, or call Wakeup after
	// advancing the clock. (Under testing/synctest use nil: time.Now is
	// already fake there.)
	Clock func() time.Time

	// MACA and MACB are the ends' reported Ethernet addresses; nil =
	// 02:00:00:00:00:0a and 02:00:00:00:00:0b.
	MACA, MACB net.HardwareAddr
}

// Names of the fault counters in Stats.Extra. They count what was done to
// the frames an end transmitted.
const (
	statLost       = "lost"       // dropped by Loss
	statDuplicated = "duplicated" // delivered twice by Duplicate
	statReordered  = "reordered"  // held back by Reorder
	statCorrupted  = "corrupted"  // one bit flipped by Corrupt
	statDelayed    = "delayed"    // delivered later than sent (Delay, Jitter, Rate)
	statFiltered   = "filtered"   // dropped by Drop
	statOverflow   = "overflow"   // dropped by MaxQueueDelay
)

// buffer states, per buffer of an end's pool.
const (
	bufFree    uint8 = iota // in the free list
	bufUser                 // owned by the caller (from Alloc or Receive)
	bufFlight               // holds a frame on its way to this end
	bufClaimed              // being given back by the current Release or Transmit
)

// flight is a frame on its way to an end, in one of its buffers.
type flight struct {
	at   int64  // delivery time, ns since the pipe's epoch
	seq  uint64 // order among frames with equal at
	buf  int32  // buffer index
	size int32  // frame length
}

func (f *flight) before(g *flight) bool {
	return f.at < g.at || (f.at == g.at && f.seq < g.seq)
}

// held is a frame that Reorder holds back.
type held struct {
	flight
	left     int   // frames still to overtake it
	deadline int64 // delivered at this time at the latest
}

// pipe is the state both ends share.
type pipe struct {
	clock     func() time.Time
	epoch     time.Time
	realClock bool // clock is time.Now

	// mu guards everything below and the ends' fields marked as such: a
	// pipe is small, and one lock taken once per batch keeps the two owner
	// goroutines simple and deadlock-free.
	mu  sync.Mutex
	seq uint64
}

// now returns the current time in ns since the epoch.
func (p *pipe) now() int64 { return int64(p.clock().Sub(p.epoch)) }

// PipeEnd is one end of an in-memory pipe made by NewPipe; it implements
// Link with Kind "pipe". Frames transmitted on one end are received on the
// other, subject to the sending direction's Faults.
//
// Each end owns a fixed pool of buffers, used both for Alloc and for the
// frames it receives: Transmit copies each frame into a free buffer of the
// receiving end (or counts it in the receiver's RxDropped when there is none,
// as a NIC does when its ring is empty) and takes the sender's buffer back at
// once. A frame still in flight (delayed, or held for reordering) already
// occupies its receiver's buffer, so Buffers must cover the frames in flight.
// The steady state allocates nothing.
//
// The pipe checks the buffer ownership rules of the Link contract strictly:
// handing it a buffer the caller does not own (not from this end, already
// given back, or resliced to start elsewhere) panics, to catch such bugs
// where they happen.
//
// Concurrency is as for any Link: Alloc, Transmit, Receive and Release from
// the end's owner goroutine; Wakeup, Info, Stats and Close (and NextDelivery,
// InFlight and SetFaults) from any goroutine. The two ends may be owned by
// different goroutines.
type PipeEnd struct {
	p    *pipe
	peer *PipeEnd
	info Info

	// Fields guarded by p.mu.
	closed bool
	arena  []byte   // Buffers × stride bytes
	stride int      // bytes per buffer
	state  []uint8  // per buffer
	free   []int32  // free buffer indexes, used as a stack
	queue  []flight // frames in flight to this end, a min-heap by (at, seq)
	held   []held   // frames to this end held back by Reorder
	// Faults of the frames this end sends, their generator and wire state.
	faults Faults
	rng    *rand.Rand
	busy   int64 // with Rate: when the wire is free again, ns since epoch
	extra  [7]uint64

	// Counters: atomic so that Stats, from any goroutine, needs no lock.
	rxFrames, rxBytes, txFrames, txBytes atomic.Uint64
	rxDropped, txDropped, txNoBuffers    atomic.Uint64
	wakeups                              atomic.Uint64

	notify chan struct{} // a frame arrived or Wakeup: wake Receive; capacity 1
	done   chan struct{} // closed by Close
	wake   atomic.Bool   // a Wakeup not yet consumed by a waiting Receive
	timer  *time.Timer   // Receive's wait timer, made on first use; owner only
}

var _ Link = (*PipeEnd)(nil)

// extra indexes
const (
	xLost = iota
	xDuplicated
	xReordered
	xCorrupted
	xDelayed
	xFiltered
	xOverflow
)

var extraNames = [...]string{statLost, statDuplicated, statReordered, statCorrupted, statDelayed, statFiltered, statOverflow}

// NewPipe returns the two ends of a new in-memory pipe. It panics if cfg is
// invalid (negative sizes, probabilities outside [0, 1]).
func NewPipe(cfg PipeConfig) (a, b *PipeEnd) {
	if cfg.Name == "" {
		cfg.Name = "pipe"
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MaxFrame == 0 {
		cfg.MaxFrame = cfg.MTU + 18
	}
	if cfg.Buffers == 0 {
		cfg.Buffers = 512
	}
	if cfg.MTU < 0 || cfg.MaxFrame < 1 || cfg.Buffers < 1 || cfg.Buffers > math.MaxInt32 {
		panic(fmt.Sprintf("pipe: bad config: MTU %d, MaxFrame %d, Buffers %d", cfg.MTU, cfg.MaxFrame, cfg.Buffers))
	}
	if err := cfg.AtoB.validate(); err != nil {
		panic(err)
	}
	if err := cfg.BtoA.validate(); err != nil {
		panic(err)
	}
	if cfg.MACA == nil {
		cfg.MACA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	}
	if cfg.MACB == nil {
		cfg.MACB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	}
	p := &pipe{clock: cfg.Clock}
	if p.clock == nil {
		p.clock, p.realClock = time.Now, true
	}
	p.epoch = p.clock()
	a = newEnd(p, cfg, cfg.Name+"-a", cfg.MACA, cfg.AtoB, 1)
	b = newEnd(p, cfg, cfg.Name+"-b", cfg.MACB, cfg.BtoA, 2)
	a.peer, b.peer = b, a
	return a, b
}

func newEnd(p *pipe, cfg PipeConfig, name string, mac net.HardwareAddr, f Faults, dir uint64) *PipeEnd {
	e := &PipeEnd{
		p: p,
		info: Info{
			Kind:     "pipe",
			Mode:     "memory",
			Name:     name,
			MAC:      append(net.HardwareAddr(nil), mac...),
			MTU:      cfg.MTU,
			MaxFrame: cfg.MaxFrame,
		},
		stride: cfg.MaxFrame,
		arena:  make([]byte, cfg.Buffers*cfg.MaxFrame),
		state:  make([]uint8, cfg.Buffers),
		free:   make([]int32, cfg.Buffers),
		queue:  make([]flight, 0, cfg.Buffers),
		held:   make([]held, 0, cfg.Buffers),
		faults: f,
		rng:    rand.New(rand.NewPCG(cfg.Seed, dir)),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	for i := range e.free {
		// Stack top is the end of the slice: hand out buffer 0 first.
		e.free[i] = int32(cfg.Buffers - 1 - i)
	}
	return e
}

// buffer returns buffer i holding n bytes, capped at its own size.
func (e *PipeEnd) buffer(i int32, n int) []byte {
	off := int(i) * e.stride
	return e.arena[off : off+n : off+e.stride]
}

// claim marks the caller-owned buffers in bufs as being given back. If one
// is not caller-owned (or appears twice) it undoes the marks, unlocks the
// pipe and panics, leaving the pipe as it was.
func (e *PipeEnd) claim(bufs [][]byte, what string) {
	for k, b := range bufs {
		off, ok := offsetIn(e.arena, b)
		if ok && off%e.stride == 0 && e.state[off/e.stride] == bufUser {
			e.state[off/e.stride] = bufClaimed
			continue
		}
		for _, b := range bufs[:k] {
			e.state[e.index(b)] = bufUser
		}
		e.misuse(b, what)
	}
}

// index returns the index of a buffer claim has checked.
func (e *PipeEnd) index(b []byte) int32 {
	off, _ := offsetIn(e.arena, b)
	return int32(off / e.stride)
}

// misuse unlocks the pipe and panics about buf.
func (e *PipeEnd) misuse(buf []byte, what string) {
	off, ok := offsetIn(e.arena, buf)
	e.p.mu.Unlock()
	switch {
	case !ok:
		panic(fmt.Sprintf("pipe %s: %s of a buffer that does not belong to this end", e.info.Name, what))
	case off%e.stride != 0:
		panic(fmt.Sprintf("pipe %s: %s of a buffer resliced away from its start (offset %d)", e.info.Name, what, off%e.stride))
	default:
		panic(fmt.Sprintf("pipe %s: %s of buffer %d that the caller does not own (already given back?)", e.info.Name, what, off/e.stride))
	}
}

// put returns buffer i to the free list.
func (e *PipeEnd) put(i int32) {
	e.state[i] = bufFree
	e.free = append(e.free, i)
}

// take removes a buffer from the free list.
func (e *PipeEnd) take() (int32, bool) {
	n := len(e.free)
	if n == 0 {
		return 0, false
	}
	i := e.free[n-1]
	e.free = e.free[:n-1]
	return i, true
}

// Alloc implements Link.
func (e *PipeEnd) Alloc(bufs [][]byte) int {
	e.p.mu.Lock()
	defer e.p.mu.Unlock()
	if e.closed {
		return 0
	}
	n := 0
	for n < len(bufs) {
		i, ok := e.take()
		if !ok {
			break
		}
		e.state[i] = bufUser
		bufs[n] = e.buffer(i, e.stride)
		n++
	}
	if n < len(bufs) {
		e.txNoBuffers.Add(1)
	}
	return n
}

// Release implements Link.
func (e *PipeEnd) Release(bufs [][]byte) {
	e.p.mu.Lock()
	if e.closed {
		e.p.mu.Unlock()
		return
	}
	e.claim(bufs, "Release")
	for _, b := range bufs {
		e.put(e.index(b))
	}
	e.p.mu.Unlock()
}

// Transmit implements Link. Frames lost, filtered or dropped by the
// receiver for want of a buffer count as transmitted: they left this end.
func (e *PipeEnd) Transmit(bufs [][]byte) (int, error) {
	p := e.p
	p.mu.Lock()
	if e.closed {
		p.mu.Unlock()
		return 0, ErrClosed
	}
	// Check every buffer before acting on any, so a misuse panics with
	// the pipe unchanged.
	e.claim(bufs, "Transmit")
	r := e.peer
	if r.closed {
		for _, b := range bufs {
			e.put(e.index(b))
		}
		e.txDropped.Add(uint64(len(bufs)))
		p.mu.Unlock()
		return 0, ErrPeerClosed
	}
	now := p.now()
	var bytes uint64
	for _, b := range bufs {
		bytes += uint64(len(b))
		e.send(r, b, now)
		e.put(e.index(b))
	}
	e.txFrames.Add(uint64(len(bufs)))
	e.txBytes.Add(bytes)
	p.mu.Unlock()
	if len(bufs) > 0 {
		select {
		case r.notify <- struct{}{}:
		default:
		}
	}
	return len(bufs), nil
}

// send puts one frame on the wire from e to r, applying e's faults. The
// pipe is locked.
func (e *PipeEnd) send(r *PipeEnd, frame []byte, now int64) {
	f := &e.faults
	at := now
	if f.Rate > 0 {
		start := max(now, e.busy)
		if f.MaxQueueDelay > 0 && start-now > int64(f.MaxQueueDelay) {
			e.extra[xOverflow]++
			return
		}
		bits := int64(len(frame)+f.RateOverhead) * 8
		e.busy = start + int64(math.Ceil(float64(bits)*1e9/float64(f.Rate)))
		at = e.busy
	}
	if f.Delay > 0 || f.Jitter > 0 {
		d := int64(f.Delay)
		if f.Jitter > 0 {
			d += e.rng.Int64N(2*int64(f.Jitter)+1) - int64(f.Jitter)
		}
		at += max(d, 0)
	}
	if at > now {
		e.extra[xDelayed]++
	}
	if f.Drop != nil && f.Drop(frame) {
		e.extra[xFiltered]++
		return
	}
	if f.Loss > 0 && e.rng.Float64() < f.Loss {
		e.extra[xLost]++
		return
	}
	copies := 1
	if f.Duplicate > 0 && e.rng.Float64() < f.Duplicate {
		copies = 2
		e.extra[xDuplicated]++
	}
	flip := -1
	if f.Corrupt > 0 && e.rng.Float64() < f.Corrupt && len(frame) > 0 {
		flip = e.rng.IntN(len(frame) * 8)
		e.extra[xCorrupted]++
	}
	reorder := f.Reorder > 0 && e.rng.Float64() < f.Reorder
	for c := range copies {
		i, ok := r.take()
		if !ok {
			r.rxDropped.Add(1)
			continue
		}
		r.state[i] = bufFlight
		dst := r.buffer(i, len(frame))
		copy(dst, frame)
		e.p.seq++
		fl := flight{at: at, seq: e.p.seq, buf: i, size: int32(len(frame))}
		if c == 0 {
			if flip >= 0 {
				dst[flip/8] ^= 1 << (flip % 8)
			}
			if reorder {
				e.extra[xReordered]++
				timeout := f.ReorderTimeout
				if timeout == 0 {
					timeout = time.Millisecond
				}
				r.held = append(r.held, held{flight: fl, left: max(f.ReorderGap, 1), deadline: at + int64(timeout)})
				continue
			}
		}
		r.push(fl)
		r.overtake(&fl)
	}
}

// overtake counts fl as overtaking the frames held for reordering and lets
// those it was the last to overtake follow it.
func (r *PipeEnd) overtake(fl *flight) {
	k := 0
	for _, h := range r.held {
		h.left--
		if h.left > 0 {
			r.held[k] = h
			k++
			continue
		}
		h.at = max(h.at, fl.at)
		r.p.seq++
		h.seq = r.p.seq
		r.push(h.flight)
	}
	r.held = r.held[:k]
}

// releaseHeld delivers held frames whose deadline has passed.
func (r *PipeEnd) releaseHeld(now int64) {
	k := 0
	for _, h := range r.held {
		if h.deadline > now {
			r.held[k] = h
			k++
			continue
		}
		h.at = max(h.at, h.deadline)
		r.p.seq++
		h.seq = r.p.seq
		r.push(h.flight)
	}
	r.held = r.held[:k]
}

// push adds a frame to the delivery heap.
func (r *PipeEnd) push(fl flight) {
	q := append(r.queue, fl)
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q[i].before(&q[parent]) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
	r.queue = q
}

// pop removes the earliest frame from the delivery heap.
func (r *PipeEnd) pop() flight {
	q := r.queue
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q[l].before(&q[m]) {
			m = l
		}
		if l+1 < n && q[l+1].before(&q[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	r.queue = q
	return top
}

// next returns the time the next frame becomes deliverable. Locked.
func (r *PipeEnd) next() (int64, bool) {
	at, ok := int64(0), false
	if len(r.queue) > 0 {
		at, ok = r.queue[0].at, true
	}
	for _, h := range r.held {
		if !ok || h.deadline < at {
			at, ok = h.deadline, true
		}
	}
	return at, ok
}

// Receive implements Link. Frames become deliverable at their delivery time
// by the pipe's clock; they are delivered in order of that time.
func (e *PipeEnd) Receive(bufs [][]byte, timeout time.Duration) (int, error) {
	return e.receive(bufs, timeout, false)
}

// WaitReceive waits as Receive does, up to timeout, until a frame is
// deliverable, and reports true then, without taking it; it reports false
// on timeout or Wakeup. A goroutine can so sleep outside a lock and
// receive with Receive(bufs, 0) under it.
func (e *PipeEnd) WaitReceive(timeout time.Duration) (bool, error) {
	n, err := e.receive(nil, timeout, true)
	return n > 0, err
}

// receive is Receive, or WaitReceive with peek (then it returns 1 when a
// frame is deliverable).
func (e *PipeEnd) receive(bufs [][]byte, timeout time.Duration, peek bool) (int, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		p := e.p
		p.mu.Lock()
		if e.closed {
			p.mu.Unlock()
			return 0, ErrClosed
		}
		now := p.now()
		if len(e.held) > 0 {
			e.releaseHeld(now)
		}
		n := 0
		var bytes uint64
		if peek && len(e.queue) > 0 && e.queue[0].at <= now {
			n = 1
		}
		for !peek && n < len(bufs) && len(e.queue) > 0 && e.queue[0].at <= now {
			fl := e.pop()
			e.state[fl.buf] = bufUser
			bufs[n] = e.buffer(fl.buf, int(fl.size))
			bytes += uint64(fl.size)
			n++
		}
		next, pending := e.next()
		p.mu.Unlock()
		if n > 0 {
			if !peek {
				e.rxFrames.Add(uint64(n))
				e.rxBytes.Add(bytes)
			}
			return n, nil
		}
		if timeout == 0 || len(bufs) == 0 && !peek || e.wake.Swap(false) {
			return 0, nil
		}
		// Sleep until a frame may be deliverable, something arrives, a
		// Wakeup, Close or the timeout.
		wait := time.Duration(-1)
		if timeout > 0 {
			wait = time.Until(deadline)
			if wait <= 0 {
				return 0, nil
			}
		}
		if pending && e.p.clockIsReal() {
			if d := time.Duration(next - now); wait < 0 || d < wait {
				wait = max(d, 0)
			}
		}
		if wait < 0 {
			select {
			case <-e.notify:
			case <-e.done:
			}
			continue
		}
		if e.timer == nil {
			e.timer = time.NewTimer(wait)
		} else {
			e.timer.Reset(wait)
		}
		select {
		case <-e.notify:
		case <-e.done:
		case <-e.timer.C:
		}
		e.timer.Stop()
	}
}

// clockIsReal reports whether the pipe runs on time.Now, so that a waiting
// Receive may sleep until the next delivery time.
func (p *pipe) clockIsReal() bool { return p.realClock }

// Wakeup implements Link.
func (e *PipeEnd) Wakeup() {
	e.wakeups.Add(1)
	e.wake.Store(true)
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// NextDelivery returns when the next frame in flight to e becomes
// deliverable by the pipe's clock, and false when none is in flight. A
// simulation advances its clock to that time and calls Receive(bufs, 0).
func (e *PipeEnd) NextDelivery() (time.Time, bool) {
	e.p.mu.Lock()
	at, ok := e.next()
	e.p.mu.Unlock()
	if !ok {
		return time.Time{}, false
	}
	return e.p.epoch.Add(time.Duration(at)), true
}

// InFlight returns how many frames are on their way to e (delivered later
// or waiting for Receive).
func (e *PipeEnd) InFlight() int {
	e.p.mu.Lock()
	defer e.p.mu.Unlock()
	return len(e.queue) + len(e.held)
}

// SetFaults replaces the faults applied to the frames e transmits from now
// on (frames already in flight keep their fate). The random generator
// carries on, so a run stays deterministic.
func (e *PipeEnd) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	e.p.mu.Lock()
	e.faults = f
	e.p.mu.Unlock()
	return nil
}

// Info implements Link.
func (e *PipeEnd) Info() Info {
	info := e.info
	info.MAC = append(net.HardwareAddr(nil), e.info.MAC...)
	return info
}

// Stats implements Link. Extra holds the counts of the faults injected into
// the frames this end transmitted ("lost", "duplicated", "reordered",
// "corrupted", "delayed", "filtered", "overflow"); RxDropped counts frames
// sent to this end that found no free buffer. Wakeups counts Wakeup calls.
func (e *PipeEnd) Stats() Stats {
	s := Stats{
		RxFrames:    e.rxFrames.Load(),
		RxBytes:     e.rxBytes.Load(),
		TxFrames:    e.txFrames.Load(),
		TxBytes:     e.txBytes.Load(),
		RxDropped:   e.rxDropped.Load(),
		TxDropped:   e.txDropped.Load(),
		TxNoBuffers: e.txNoBuffers.Load(),
		Wakeups:     e.wakeups.Load(),
		Extra:       make(map[string]uint64, len(extraNames)),
	}
	e.p.mu.Lock()
	for i, name := range extraNames {
		s.Extra[name] = e.extra[i]
	}
	e.p.mu.Unlock()
	return s
}

// Close implements Link. It discards the frames in flight to this end and
// makes a Receive waiting in another goroutine return ErrClosed. The other
// end stays open, but its Transmit fails with ErrPeerClosed.
func (e *PipeEnd) Close() error {
	e.p.mu.Lock()
	defer e.p.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	e.queue = e.queue[:0]
	e.held = e.held[:0]
	close(e.done)
	return nil
}
