package roce

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/qp"
)

// worker owns one link and the engine of the QPs sharded to it (QPN modulo
// the number of workers). Frames are taken off the link, and the engine
// run, by whoever holds mu: the worker goroutine, a goroutine waiting in
// CQ.Wait that watches the link, a goroutine calling Progress, or a user
// call that posts (recv.go says who sleeps on the link and when). Over a
// link that can wait without receiving (a descriptor, or WaitReceive)
// every use of the link happens under mu, so a user call that posted runs
// the engine and transmits itself; over any other link the goroutine
// sleeps inside Receive, and user calls transmit themselves only if the
// link allows it (ConcurrentTransmit), else they kick the goroutine.
type worker struct {
	d    *Device
	id   int
	link link.Link

	// mu guards the engine and its QPs and SRQs (eng, qps, srqs, armed,
	// dirty, rxNotify), out, bufs, inReceive, completed, heldUntil and kArmed; it
	// is held for each round and each user call, not per packet.
	mu        sync.Mutex
	eng       *qp.Engine
	out       output
	qps       map[uint32]*QP
	armed     []*SRQ // SRQs with a limit armed
	dirty     []*QP  // QPs with an error completion to look at after the batch
	rxNotify  []*QP  // QPs waiting for their first packet (NotifyReceive)
	stop      bool   // set by shutdown
	bufs      [][]byte
	inReceive bool          // the goroutine is in link.Receive (runReceive)
	completed bool          // the engine added completions since notifyWaiterLocked
	heldUntil time.Duration // when answers held back in out must go at the latest (qp.Never: none held)
	kArmed    time.Duration // the deadline armed on the goroutine's watch (qp.Never: none)
	polls     uint64        // Progress rounds run; the goroutine's count at its last look is kPolls
	kPolls    uint64

	stopping atomic.Bool  // stop, readable without mu
	rx       atomic.Int32 // who watches the link: rxWorker, rxWaiter, rxHandback (recv.go)
	pending  atomic.Bool  // a user call queued work for the watcher
	// deadline is the engine's next deadline and sleepUntil the time
	// the sleeping watcher wakes at the latest (engine times; qp.Never
	// for none): a user call that ran the engine kicks the watcher only
	// when it armed a deadline earlier than that.
	deadline   atomic.Int64
	sleepUntil atomic.Int64
	// direct: user calls may run the engine and transmit themselves
	// (not with Config.BusyPoll, whose goroutine is always awake).
	direct       bool
	concurrentTX bool // the link allows Transmit during Receive

	// The watches of a link with a descriptor: the goroutine's and the
	// waiters' (nil without a descriptor).
	wk, wa   *watch
	waiter   waitLink    // the link, if it waits without receiving and has no descriptor
	sleeping atomic.Bool // the goroutine sleeps in WaitReceive or Receive
	roundErr error       // the goroutine's last round's link error; owned by it
	kbufs    [][]byte    // the goroutine's receive batch in link.Receive; owned by it
	// The watching waiter's CQ, context and context deadline; written
	// by the waiter when it takes the watch (rx), read by it.
	wcq       *CQ
	wctx      context.Context
	wdeadline time.Time
	werr      error // the watching waiter's round's link error
	// The watch callbacks, bound once (a method value allocates).
	waiterFn, goroutineFn func() bool
	waiters               sync.WaitGroup // goroutines in waitOn, for shutdown

	// fmu guards fq and ffree: frames other workers received for our QPs,
	// copied into buffers of ffree.
	fmu   sync.Mutex
	fq    [][]byte
	ffree [][]byte
	fwork [][]byte // fq taken by inputForwarded; guarded by mu

	// input's frames for this worker, decoded, and their sizes; guarded
	// by mu.
	decoded []bth.Frame
	sizes   []int

	forwarded, fwdDropped, txDropped, batches, linkErrors    atomic.Uint64
	polledFrames, polledBatches, waiterFrames, waiterBatches atomic.Uint64
	handovers, standbys                                      atomic.Uint64

	done chan struct{}
}

func newWorker(d *Device, id int, l link.Link, nlinks int) (*worker, error) {
	w := &worker{d: d, id: id, link: l, qps: make(map[uint32]*QP), done: make(chan struct{})}
	w.out = output{l: l, w: w, stash: make([][]byte, 64), tx: make([][]byte, 0, 64)}
	eng, err := qp.NewEngine(qp.EngineConfig{Out: &w.out, LocalIPs: d.local, PortMTU: d.info.ActiveMTU, MaxInflight: d.cfg.MaxInflight,
		LineRate: d.cfg.LineRate, PaceBurst: d.cfg.PaceBurst, CC: d.cfg.CC})
	if err != nil {
		return nil, fmt.Errorf("roce: worker %d: %w", id, err)
	}
	w.eng = eng
	if link.ConcurrentTransmit(l) {
		w.concurrentTX = true
	}
	if f, ok := l.(fdLink); ok && !d.cfg.noGoroutines && !d.cfg.BusyPoll {
		if w.wk, err = newWatch(f.FD(), true, &d.readied); err == nil {
			if w.wa, err = newWatch(f.FD(), false, &d.readied); err != nil {
				w.wk.close()
				w.wk = nil
			}
		}
	}
	if wl, ok := l.(waitLink); ok && w.wk == nil {
		w.waiter = wl
	}
	w.direct = !d.cfg.BusyPoll
	w.waiterFn, w.goroutineFn = w.waiterReady, w.goroutineReady
	w.heldUntil, w.kArmed = qp.Never, qp.Never
	if w.wk != nil {
		w.wk.setInterest(true) // the goroutine is the first watcher
	}
	w.deadline.Store(int64(qp.Never))
	w.sleepUntil.Store(int64(qp.Never))
	w.bufs = make([][]byte, d.cfg.Batch)
	w.kbufs = make([][]byte, d.cfg.Batch)
	w.decoded, w.sizes = make([]bth.Frame, d.cfg.Batch), make([]int, d.cfg.Batch)
	if nlinks > 1 {
		mf := l.Info().MaxFrame
		slab := make([]byte, d.cfg.Forward*mf)
		w.ffree = make([][]byte, 0, d.cfg.Forward)
		w.fq = make([][]byte, 0, d.cfg.Forward)
		w.fwork = make([][]byte, 0, d.cfg.Forward)
		for i := range d.cfg.Forward {
			w.ffree = append(w.ffree, slab[i*mf:(i+1)*mf:(i+1)*mf])
		}
	}
	return w, nil
}

// run is the worker goroutine.
func (w *worker) run() {
	defer close(w.done)
	switch {
	case w.d.cfg.BusyPoll:
		w.runBusy()
	case w.wk != nil:
		w.runWatch()
	case w.waiter != nil:
		w.runWait()
	default:
		w.runReceive()
	}
}

// postedLocked is called, with mu held, after a user call queued work. If
// the caller may use the link (direct, and the goroutine is not inside
// a Receive that forbids it) and the watcher sleeps, or urgent is set (the
// request starts an idle send queue: someone waits for it), the caller
// runs the engine and transmits what is ready itself, saving the
// watcher's wake-up (or its next turn) on the way of the frames; this
// also sends what a round held back. Otherwise the watcher, awake anyway,
// sends it with whatever else is ready: one transmit call for many
// frames. It reports whether the watcher must still be kicked.
func (w *worker) postedLocked(urgent bool) bool {
	if w.stop || !w.direct || w.inReceive && !w.concurrentTX || !urgent && !w.watcherAsleep() {
		return true
	}
	now := w.d.now()
	dl := w.eng.Poll(now)
	w.deadline.Store(int64(dl))
	w.flushLocked()
	w.afterBatch()
	w.notifyWaiterLocked()
	return dl < time.Duration(w.sleepUntil.Load())
}

// watcherAsleep reports whether the link's watcher sleeps (spinners in
// Progress count as asleep: they may have stopped).
func (w *worker) watcherAsleep() bool {
	if w.wk != nil {
		switch w.rx.Load() {
		case rxWaiter:
			return w.wa.asleep.Load()
		case rxPolled:
			return true
		}
		return w.wk.asleep.Load()
	}
	return w.sleeping.Load()
}

// kick tells the watcher that a user call queued work: it wakes the
// watcher if it sleeps.
func (w *worker) kick() {
	w.pending.Store(true)
	w.wake()
}

// wake ends the sleep of the link's watcher (the worker goroutine while
// goroutines poll: they may have stopped). A waiter that leaves looks at
// pending after it hands the link back (recv.go), so that a wake-up meant
// for it reaches the goroutine.
func (w *worker) wake() {
	if w.wk != nil {
		x := w.wk
		if w.rx.Load() == rxWaiter {
			x = w.wa
		}
		if x.asleep.Load() {
			x.poke()
		}
	}
	if w.sleeping.Load() {
		w.link.Wakeup()
	}
}

// idleTick is the longest the watcher sleeps when user calls may run the
// engine (worker.direct): timers armed by those calls further away than
// this do not cost a wakeup, and an idle worker wakes 1/idleTick times a
// second.
const idleTick = 10 * time.Millisecond

// input gives the engine the frames of its QPs and hands the others to
// their workers, waking each of those once for the batch (before running
// our own frames, so that it works on its share meanwhile). A wakeup per
// frame cost an eventfd write per frame while the other worker slept: a
// large part of what forwarding costs a stream whose peer QPs sit on
// different workers (BenchmarkVethWriteForwarded). Each frame is decoded
// once, here, and given to the engine decoded; what does not decode goes
// to the engine raw, which counts and drops it.
func (w *worker) input(frames [][]byte, now time.Duration) {
	nw := uint32(len(w.d.workers))
	if nw == 1 {
		w.eng.Input(frames, now)
		return
	}
	local := 0
	var to uint64 // the workers given frames, a bit each (64 at most)
	for i, b := range frames {
		f := &w.decoded[local]
		if f.Decode(b) != nil {
			w.eng.Input(frames[i:i+1], now)
			continue
		}
		if qpn := f.BTH.DestQP(); qpn%nw != uint32(w.id) {
			w.d.workers[qpn%nw].forward(b)
			to |= 1 << (qpn % nw)
			continue
		}
		w.sizes[local] = len(b)
		local++
	}
	for ; to != 0; to &= to - 1 {
		w.d.workers[bits.TrailingZeros64(to)].kick()
	}
	for i := range local {
		w.eng.InputDecoded(&w.decoded[i], w.sizes[i], now)
	}
}

// forward copies a frame received by another worker into w's queue; the
// caller kicks w after its batch.
func (w *worker) forward(b []byte) {
	w.fmu.Lock()
	if len(w.ffree) == 0 || len(b) > cap(w.ffree[len(w.ffree)-1]) {
		w.fmu.Unlock()
		w.fwdDropped.Add(1)
		return
	}
	buf := w.ffree[len(w.ffree)-1]
	w.ffree = w.ffree[:len(w.ffree)-1]
	w.fq = append(w.fq, buf[:copy(buf[:cap(buf)], b)])
	w.fmu.Unlock()
	w.forwarded.Add(1)
}

// inputForwarded feeds the engine the frames other workers forwarded and
// returns how many.
func (w *worker) inputForwarded(now time.Duration) int {
	w.fmu.Lock()
	if len(w.fq) == 0 {
		w.fmu.Unlock()
		return 0
	}
	w.fq, w.fwork = w.fwork[:0], w.fq
	w.fmu.Unlock()
	n := len(w.fwork)
	w.eng.Input(w.fwork, now)
	w.fmu.Lock()
	w.ffree = append(w.ffree, w.fwork...)
	w.fmu.Unlock()
	clear(w.fwork)
	w.fwork = w.fwork[:0]
	return n
}

// afterBatch runs with mu held after the engine ran: QPs that failed
// release the memory references of their flushed work requests, armed
// SRQs below their limit raise their event, and QPs that took their first
// packet call their NotifyReceive function.
func (w *worker) afterBatch() {
	for i, q := range w.dirty {
		q.afterError()
		w.dirty[i] = nil
	}
	w.dirty = w.dirty[:0]
	for i := 0; i < len(w.rxNotify); {
		q := w.rxNotify[i]
		if !q.destroyed && !q.received() {
			i++
			continue
		}
		w.rxNotify = slices.Delete(w.rxNotify, i, i+1)
		f := q.onReceive
		q.onReceive = nil
		if !q.destroyed {
			f()
		}
	}
	for i := 0; i < len(w.armed); {
		s := w.armed[i]
		if s.s.Len() < s.limit {
			s.limit = 0
			w.armed = append(w.armed[:i], w.armed[i+1:]...)
			w.d.event(Event{Type: EventSRQLimitReached, SRQ: s})
			continue
		}
		i++
	}
}

// shutdown moves every QP of the worker to ERR (flushing its work
// requests), stops the goroutine and a watching waiter, and gives back
// the link's buffers.
func (w *worker) shutdown() {
	w.mu.Lock()
	for _, q := range w.qps {
		q.closeLocked()
	}
	w.afterBatch()
	w.stop = true
	w.stopping.Store(true)
	w.mu.Unlock()
	if w.wk != nil {
		w.wk.poke()
		w.wa.poke()
	}
	w.link.Wakeup()
	<-w.done
	w.waiters.Wait()
	w.mu.Lock()
	w.out.flush()
	w.out.releaseStash()
	if w.wk != nil {
		w.wk.closed, w.wa.closed = true, true
		w.wk.close()
		w.wa.close()
	}
	w.mu.Unlock()
}

// output is the engine's qp.Output over the worker's link: it hands out
// link buffers from a stash filled in batches and transmits in batches.
type output struct {
	l     link.Link
	w     *worker
	stash [][]byte // stash[:n] are allocated link buffers not yet used
	n     int
	tx    [][]byte
}

// Alloc implements qp.Output.
func (o *output) Alloc() []byte {
	if o.n == 0 {
		o.n = o.l.Alloc(o.stash)
		if o.n == 0 {
			o.flush()
			o.n = o.l.Alloc(o.stash)
			if o.n == 0 {
				return nil
			}
		}
	}
	o.n--
	b := o.stash[o.n]
	o.stash[o.n] = nil
	return b
}

// Send implements qp.Output.
func (o *output) Send(frame []byte) {
	o.tx = append(o.tx, frame)
	if len(o.tx) == cap(o.tx) {
		o.flush()
	}
}

// flush transmits the queued frames.
func (o *output) flush() {
	if len(o.tx) == 0 {
		return
	}
	n, _ := o.l.Transmit(o.tx)
	if n < len(o.tx) {
		o.w.txDropped.Add(uint64(len(o.tx) - n))
	}
	clear(o.tx)
	o.tx = o.tx[:0]
}

// releaseStash gives unused buffers back to the link.
func (o *output) releaseStash() {
	if o.n > 0 {
		o.l.Release(o.stash[:o.n])
		clear(o.stash[:o.n])
		o.n = 0
	}
}
