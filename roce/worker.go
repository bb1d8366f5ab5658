package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/qp"
)

// worker owns one link and the engine of the QPs sharded to it (QPN modulo
// the number of workers). Its goroutine receives a batch, feeds the
// engine, sends what the engine has ready and sleeps in Receive until the
// engine's next deadline or a Wakeup. Other goroutines (the users' calls)
// take mu to reach the engine between batches; over a link that allows it
// (AF_XDP) they then run the engine and transmit themselves, and kick the
// worker only when they armed a deadline earlier than its wakeup; over
// other links they kick it to do the sending.
//
// Pollers (Device.Progress, CQ.Poll) receive too: while one polls, the
// goroutine hands the link over after its batch and parks (progress.go),
// so that only one goroutine receives at a time and batches reach the
// engine in the order they left the link.
type worker struct {
	d    *Device
	id   int
	link link.Link

	// mu guards the engine and its QPs and SRQs (eng, qps, srqs, armed,
	// dirty) and out; the worker holds it for each batch, user calls for
	// each call.
	mu    sync.Mutex
	eng   *qp.Engine
	out   output
	qps   map[uint32]*QP
	armed []*SRQ // SRQs with a limit armed
	dirty []*QP  // QPs with an error completion to look at after the batch
	stop  bool   // set by shutdown

	sleeping atomic.Bool // in a Receive that may wait
	pending  atomic.Bool // a user call queued work since the last batch
	// With a link that allows it (ConcurrentTransmit), a user call runs
	// the engine and transmits itself, and wakes the worker only when the engine's next deadline (deadline)
	// comes before the time the worker sleeps until (sleepUntil). Both
	// are engine times; qp.Never for none.
	direct     bool
	deadline   atomic.Int64
	sleepUntil atomic.Int64

	// fmu guards fq and ffree: frames other workers received for our QPs,
	// copied into buffers of ffree.
	fmu   sync.Mutex
	fq    [][]byte
	ffree [][]byte
	fwork [][]byte // fq taken by inputForwarded; guarded by mu

	bufs  [][]byte // the goroutine's receive batch, owned by it
	pbufs [][]byte // the pollers' receive batch, guarded by mu
	local [][]byte // input's frames for this worker, guarded by mu

	// Caller-driven progress. receiving, written under mu, says that the
	// goroutine owns the link's receive side: it may be in Receive, or
	// hold frames it has not fed yet. While it is clear the goroutine
	// parks (sleeping and parked set, on park and timer) and pollers
	// receive under mu. polled is the engine time of the latest poll
	// (noPoll when a poller went to sleep): the goroutine parks after a
	// batch if someone polled less than pollLease before, and takes the
	// link back when nobody has polled for pollLease.
	receiving atomic.Bool
	parked    atomic.Bool
	polled    atomic.Int64
	park      chan struct{} // wakes the parked goroutine; capacity 1
	timer     *time.Timer   // the parked goroutine's; owned by it
	leaseLen  time.Duration // how long it parks at most; owned by it

	forwarded, fwdDropped, txDropped, batches, linkErrors atomic.Uint64
	polledFrames, polledBatches, parks                    atomic.Uint64

	done chan struct{}
}

func newWorker(d *Device, id int, l link.Link, nlinks int) (*worker, error) {
	w := &worker{d: d, id: id, link: l, qps: make(map[uint32]*QP), done: make(chan struct{}), park: make(chan struct{}, 1)}
	w.out = output{l: l, w: w, stash: make([][]byte, 64), tx: make([][]byte, 0, 64)}
	eng, err := qp.NewEngine(qp.EngineConfig{Out: &w.out, LocalIPs: d.local, PortMTU: d.info.ActiveMTU, MaxInflight: d.cfg.MaxInflight,
		LineRate: d.cfg.LineRate, PaceBurst: d.cfg.PaceBurst, CC: d.cfg.CC})
	if err != nil {
		return nil, fmt.Errorf("roce: worker %d: %w", id, err)
	}
	w.eng = eng
	if link.ConcurrentTransmit(l) && !d.cfg.BusyPoll {
		w.direct = true
	}
	w.deadline.Store(int64(qp.Never))
	w.sleepUntil.Store(int64(qp.Never))
	w.polled.Store(noPoll)
	w.leaseLen = pollLease
	w.receiving.Store(true)
	w.timer = time.NewTimer(time.Hour)
	w.timer.Stop()
	w.bufs = make([][]byte, d.cfg.Batch)
	w.pbufs = make([][]byte, d.cfg.Batch)
	w.local = make([][]byte, 0, d.cfg.Batch)
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

// postedLocked is called, with mu held, after a user call queued work. If
// the link allows it and the worker sleeps, or urgent is set (the request
// starts an idle send queue: someone waits for it), the caller runs the
// engine and transmits what is ready itself, saving the worker's wakeup
// (or its next turn) on the way of the frames. Otherwise the worker, awake
// anyway, sends it with whatever else is ready: one transmit call for many
// frames. It reports whether the worker must still be kicked.
//
// While pollers receive (receiving is clear) the goroutine does not touch
// the link without mu, so the caller may transmit over any link.
func (w *worker) postedLocked(urgent bool) bool {
	if w.stop || !w.direct && w.receiving.Load() || !urgent && !w.sleeping.Load() {
		return true
	}
	dl := w.eng.Poll(w.d.now())
	w.deadline.Store(int64(dl))
	w.out.flush()
	w.afterBatch()
	return dl < time.Duration(w.sleepUntil.Load())
}

// kick tells the worker that a user call queued work: it wakes the worker
// if it sleeps in Receive or parks.
func (w *worker) kick() {
	w.pending.Store(true)
	if w.sleeping.Load() {
		if w.parked.Load() {
			w.unpark()
		} else {
			w.link.Wakeup()
		}
	}
}

// unpark wakes the parked goroutine, or makes its next park return at
// once.
func (w *worker) unpark() {
	select {
	case w.park <- struct{}{}:
	default:
	}
}

// idleTick is the longest a worker sleeps when user calls may run its
// engine (worker.direct): timers armed by those calls further away than
// this do not cost a wakeup, and an idle worker wakes 1/idleTick times a
// second.
const idleTick = 10 * time.Millisecond

// run is the worker goroutine.
func (w *worker) run() {
	defer close(w.done)
	for {
		if !w.receiving.Load() {
			if w.parkBatch() {
				return
			}
			continue
		}
		timeout := time.Duration(0)
		if !w.d.cfg.BusyPoll {
			w.sleeping.Store(true)
			now := w.d.now()
			until := time.Duration(w.deadline.Load())
			if w.direct {
				// Wake at least every idleTick, so that a user
				// call that arms a later timer need not wake us.
				until = min(until, now+idleTick)
			}
			w.sleepUntil.Store(int64(until))
			switch {
			case w.pending.Swap(false):
				timeout = 0
			case time.Duration(w.deadline.Load()) < until:
				// A user call ran the engine meanwhile and
				// may not have seen sleepUntil: look again.
				timeout = 0
			case until == qp.Never:
				timeout = -1
			default:
				timeout = max(until-now, 0)
			}
		} else {
			w.pending.Store(false)
		}
		n, err := w.link.Receive(w.bufs, timeout)
		w.sleeping.Store(false)
		got := w.d.now()
		w.mu.Lock()
		if w.stop {
			if n > 0 {
				w.link.Release(w.bufs[:n])
			}
			w.mu.Unlock()
			return
		}
		if err != nil && !errors.Is(err, link.ErrClosed) {
			// A transient link error: count it and go on after a pause,
			// so that a broken link does not spin.
			w.linkErrors.Add(1)
			if n > 0 {
				w.link.Release(w.bufs[:n])
			}
			w.mu.Unlock()
			time.Sleep(time.Millisecond)
			continue
		}
		now := w.d.now()
		if n > 0 {
			w.batches.Add(1)
			w.input(w.bufs[:n], now)
			w.link.Release(w.bufs[:n])
		}
		w.inputForwarded(now)
		w.deadline.Store(int64(w.eng.Poll(now)))
		w.out.flush()
		w.afterBatch()
		if !w.d.cfg.BusyPoll && time.Duration(w.polled.Load())+pollLease > got {
			// Someone polls: let the pollers receive.
			w.receiving.Store(false)
		}
		w.mu.Unlock()
		if errors.Is(err, link.ErrClosed) {
			return
		}
		if n > 0 && !w.d.cfg.BusyPoll {
			// Completions of this batch may have readied a user
			// goroutine on our P; let it run now rather than after
			// we block in Receive's poll, where it would wait for the
			// runtime to take the P back (tens of µs or more).
			runtime.Gosched()
		}
	}
}

// input gives the engine the frames of its QPs and hands the others to
// their workers, waking each of those once for the batch (before running
// our own frames, so that it works on its share meanwhile). A wakeup per
// frame cost an eventfd write per frame while the other worker slept: a
// large part of what forwarding costs a stream whose peer QPs sit on
// different workers (BenchmarkVethWriteForwarded).
func (w *worker) input(frames [][]byte, now time.Duration) {
	nw := uint32(len(w.d.workers))
	if nw == 1 {
		w.eng.Input(frames, now)
		return
	}
	local := w.local[:0]
	var to uint64 // the workers given frames, a bit each (64 at most)
	for _, b := range frames {
		if qpn, ok := destQPN(b); ok && int(qpn%nw) != w.id {
			w.d.workers[qpn%nw].forward(b)
			to |= 1 << (qpn % nw)
			continue
		}
		local = append(local, b)
	}
	for ; to != 0; to &= to - 1 {
		w.d.workers[bits.TrailingZeros64(to)].kick()
	}
	if len(local) > 0 {
		w.eng.Input(local, now)
	}
	clear(local)
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

// destQPN returns the BTH destination QP of a RoCE v2 frame, without
// checking more than the lengths.
func destQPN(b []byte) (uint32, bool) {
	const eth = 14
	if len(b) < eth {
		return 0, false
	}
	off := eth
	typ := binary.BigEndian.Uint16(b[12:])
	if typ == 0x8100 {
		if len(b) < eth+4 {
			return 0, false
		}
		typ = binary.BigEndian.Uint16(b[16:])
		off += 4
	}
	switch typ {
	case 0x0800:
		if len(b) < off+1 {
			return 0, false
		}
		off += int(b[off]&0xf) * 4
	case 0x86dd:
		off += 40
	default:
		return 0, false
	}
	off += 8 // UDP
	if len(b) < off+8 {
		return 0, false
	}
	return uint32(b[off+5])<<16 | uint32(b[off+6])<<8 | uint32(b[off+7]), true
}

// afterBatch runs with mu held after the engine ran: QPs that failed
// release the memory references of their flushed work requests, and armed
// SRQs below their limit raise their event.
func (w *worker) afterBatch() {
	for i, q := range w.dirty {
		q.afterError()
		w.dirty[i] = nil
	}
	w.dirty = w.dirty[:0]
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
// requests), stops the goroutine and gives back the link's buffers.
func (w *worker) shutdown() {
	w.mu.Lock()
	for _, q := range w.qps {
		q.closeLocked()
	}
	w.afterBatch()
	w.stop = true
	w.mu.Unlock()
	w.link.Wakeup()
	w.unpark()
	<-w.done
	w.mu.Lock()
	w.out.flush()
	w.out.releaseStash()
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
