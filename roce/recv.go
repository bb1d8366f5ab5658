package roce

import (
	"context"
	"errors"
	"math/bits"
	"runtime"
	"time"

	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/qp"
)

// # Receiving: who takes frames off a link, and who sleeps on it
//
// Frames are taken off a link only by a goroutine that holds the worker's
// mu, without waiting, and fed to the engine before mu is released
// (roundLocked): whoever takes them, they reach the engine in the order
// they left the link, so any goroutine may do the receive work. Waiting
// for frames is a separate role, the watcher's: the goroutine that does
// the link's work when the kernel wakes it (frames arrived, the engine's
// next timer is due, or another goroutine queued work and poked it). A
// link has one watcher at a time, named by the worker's rx state:
//
//	state       the watcher                          the worker goroutine
//	rxWorker    the worker goroutine                 listens to the link; woken, runs rounds
//	rxWaiter    a goroutine in CQ.Wait               does not listen; woken by its deadline,
//	                                                 sends answers held back past heldUntil
//	rxHandback  the worker goroutine, once it wakes  listens again, wakes by the deadline
//	                                                 the leaving waiter armed, or frames
//	rxPolled    goroutines calling Progress          does not listen; wakes every idleTick,
//	                                                 runs queued work, sends held answers
//
//	event                               from        to          action
//	Wait on an empty CQ                 rxWorker    rxWaiter    the goroutine stops listening
//	Wait on an empty CQ                 rxHandback  rxWaiter    the goroutine stops listening
//	Wait on an empty CQ                 rxWaiter    rxWaiter    sleep on the CQ's notification instead
//	the waiter's CQ has a completion,
//	  its ctx ends, or Close            rxWaiter    rxHandback  the goroutine listens again (woken at
//	                                                            once if frames came), its deadline
//	                                                            armed; poked if work is pending
//	the goroutine wakes                 rxHandback  rxWorker    it runs rounds
//	Progress                            rxWorker,   rxPolled    the goroutine stops listening
//	                                    rxHandback
//	Wait on an empty CQ                 rxPolled    rxWaiter    —
//	the goroutine's idleTick finds no
//	  Progress since its last one       rxPolled    rxWorker    it listens and runs rounds
//
// Handing the link over and back is a change of state and of what the
// sleeping worker goroutine listens to, and nothing else: nobody is woken
// on the way. The goroutine sleeps on an epoll instance that holds the
// socket (watch.go); the waiter switches the goroutine's interest in the
// socket off when it takes the link and on when it leaves (epoll_ctl on
// that instance), which wakes the goroutine at once if frames came
// meanwhile, so that frames wake one goroutine, the watcher.
//
// A waiter sleeps on the link's socket itself and, woken, receives and
// runs the engine: the message goes from the kernel to the goroutine that
// waits for it in one hop, as data does to a thread reading a TCP socket,
// instead of waking the worker goroutine which then wakes the waiter.
// While it watches it also runs the engine's timers and the work other
// goroutines queue (kick). Only links with a descriptor (fdLink) can be
// watched so, and only a CQ whose QPs all run on one worker is waited for
// so; a Wait that cannot watch (another goroutine watches, the CQ spans
// workers, the link has no descriptor, Config.BusyPoll) sleeps on the
// CQ's notification while the watcher works.
//
// Without a descriptor the worker goroutine is always the watcher: over a
// link that can wait without receiving (waitLink, link.Pipe) it sleeps in
// WaitReceive and receives under mu like everyone else; over any other
// link it sleeps in link.Receive, outside mu, and sets inReceive
// meanwhile, during which nobody else receives (nor transmits, unless the
// link allows ConcurrentTransmit). With Config.BusyPoll it spins on
// roundLocked instead of sleeping.
//
// Device.Progress and CQ.Progress are the explicit way to receive without
// sleeping: they run one round on each worker whose mu is free, whatever
// the state. A goroutine that spins on them has no end the link could
// see, so the worker goroutine, whose frames the spinner now takes (and
// which would otherwise be woken by each of them, to compete with the
// spinner for mu and the cores), stops listening and takes the link back
// at its first idleTick wake-up with no Progress since the one before.
//
// Answers held back: a waiter or Progress that fed frames leaves what the
// engine made ready (ACKs, responses, requests a window opening released)
// in the worker's output, since the caller is likely to post at once: the
// post sends them with its own frames in one transmit (one system call on
// AF_XDP) instead of two, the first of them on the way of the completion.
// They leave with the next post or round on the worker, whoever makes it,
// or at heldUntil (holdMax after they were held) when the worker
// goroutine wakes: its deadline, in every state, is never more than
// idleTick away, so that holding answers back arms nothing (a delayed
// ACK, as TCP's, bounded more tightly). The worker goroutine itself never
// holds answers back.

// holdMax bounds how long answers are held back.
const holdMax = idleTick

// rx states; see the table above.
const (
	rxWorker int32 = iota
	rxWaiter
	rxHandback
	rxPolled
)

// Progress lets the calling goroutine do the receive work of the device's
// workers without waiting: for each worker whose lock is free (and whose
// goroutine is not inside its link's Receive, over a link that cannot
// wait without receiving), it receives one batch of frames, feeds them to
// the QPs, runs their timers and transmits what they have ready, and it
// returns the number of frames it fed. Completions land in the CQs as
// they do from the workers.
//
// A goroutine that busy-polls a CQ calls Poll and, when the CQ is empty,
// Progress (or CQ.Progress): the received message then reaches it without
// a wake-up of any goroutine. It is also the way to wait without sleeping
// for what completes nothing locally, such as an RDMA WRITE landing in a
// buffer. The answers to what it received are held back until the next
// post, Progress or round on that worker, holdMax (10 ms) at most (see
// recv.go).
// With Config.BusyPoll the workers spin and Progress does nothing.
//
// Progress does not allocate and is safe for concurrent use.
func (d *Device) Progress() int { return d.progress(^uint64(0)) }

// progress is Progress for the workers in mask (bit i: worker i).
func (d *Device) progress(mask uint64) int {
	if d.cfg.BusyPoll {
		return 0
	}
	n := 0
	for m := mask & (1<<len(d.workers) - 1); m != 0; m &= m - 1 {
		n += d.workers[bits.TrailingZeros64(m)].progress()
	}
	return n
}

// progress is Device.Progress for one worker.
func (w *worker) progress() int {
	if !w.mu.TryLock() {
		return 0
	}
	if w.stop || w.inReceive {
		w.mu.Unlock()
		return 0
	}
	w.polls++
	if s := w.rx.Load(); w.wk != nil && (s == rxWorker || s == rxHandback) {
		w.rx.Store(rxPolled)
		w.wk.setInterest(false)
	}
	n, _ := w.roundLocked(w.d.now(), true)
	w.mu.Unlock()
	if n > 0 {
		w.polledBatches.Add(1)
		w.polledFrames.Add(uint64(n))
	}
	return n
}

// roundLocked takes up to a batch of frames off the link without
// waiting, feeds them and the frames other workers forwarded to the
// engine, runs the engine if there was anything (frames, queued work,
// an expired timer) and returns the number of frames fed. It first sends
// what was held back; with hold it holds back the answers to this round's
// frames, else it sends them. mu is held and inReceive clear. A link
// error other than ErrClosed is counted and returned.
func (w *worker) roundLocked(now time.Duration, hold bool) (int, error) {
	w.flushLocked()
	n, err := w.link.Receive(w.bufs, 0)
	if err != nil {
		if n > 0 {
			w.link.Release(w.bufs[:n])
			n = 0
		}
		if !errors.Is(err, link.ErrClosed) {
			w.linkErrors.Add(1)
		}
	}
	if n > 0 {
		w.input(w.bufs[:n], now)
		w.link.Release(w.bufs[:n])
	}
	fed := n + w.inputForwarded(now)
	if fed > 0 || w.pending.Swap(false) || time.Duration(w.deadline.Load()) <= now {
		w.deadline.Store(int64(w.eng.Poll(now)))
		if fed > 0 && hold {
			w.holdLocked(now)
		} else {
			w.flushLocked()
		}
		w.afterBatch()
	}
	w.notifyWaiterLocked()
	return fed, err
}

// flushLocked sends what the engine made ready, answers held back
// included. mu is held.
func (w *worker) flushLocked() {
	w.out.flush()
	w.heldUntil = qp.Never
}

// holdLocked leaves what the engine made ready in out, to go with the
// next post or round, or at holdMax from now at the latest, when the
// worker goroutine wakes (its deadline is never further). mu is held.
func (w *worker) holdLocked(now time.Duration) {
	if len(w.out.tx) == 0 {
		return
	}
	if w.heldUntil == qp.Never {
		w.heldUntil = now + holdMax
	}
}

// armGoroutineLocked makes the worker goroutine's sleep on the link end
// at t at the latest (qp.Never: no deadline needed), poking it if it
// sleeps until later. A deadline armed earlier that has not passed is
// left alone (the goroutine then wakes early, looks and arms again), so
// that a round trip pays no poke. mu is held.
func (w *worker) armGoroutineLocked(t, now time.Duration) {
	if w.kArmed <= t && w.kArmed > now {
		return
	}
	earlier := t < w.kArmed
	w.kArmed = t
	if earlier && w.wk.asleep.Load() {
		w.wk.poke()
	}
}

// deadlineTime is the wall-clock time of engine time t (zero for
// qp.Never), for a watch's deadline.
func (w *worker) deadlineTime(t time.Duration) time.Time {
	if t == qp.Never {
		return time.Time{}
	}
	return w.d.epoch.Add(t)
}

// watcherDeadlineLocked is when the watcher must wake at the latest: the
// engine's next timer, idleTick from now, or the end of held answers.
func (w *worker) watcherDeadlineLocked(now time.Duration) time.Duration {
	return min(time.Duration(w.deadline.Load()), now+idleTick, w.heldUntil)
}

// notifyWaiterLocked pokes a waiter that sleeps on the link when the
// engine added completions since the last call: the goroutine that ran
// the engine was not the waiter, which must look at its CQ. mu is held.
func (w *worker) notifyWaiterLocked() {
	if !w.completed {
		return
	}
	w.completed = false
	if w.wa != nil && w.wa.asleep.Load() {
		w.wa.poke()
	}
}

// watchable reports whether a waiter may sleep on the worker's link.
func (w *worker) watchable() bool {
	return w.wa != nil
}

// waitOn makes the calling goroutine the link's watcher until c holds a
// completion, ctx is done or the device closes, and reports true; or, if
// another waiter watches, returns false at once. When the link fails (a
// receive error other than ErrClosed, such as the socket of an interface
// that went away) it hands the link back and reports false: the caller
// then sleeps on the CQ's notification while the worker goroutine, which
// counts link errors and pauses between them, has the link, instead of
// retrying the failing link in a loop.
func (w *worker) waitOn(c *CQ, ctx context.Context) bool {
	w.mu.Lock()
	s := w.rx.Load()
	if s == rxWaiter || w.stop {
		w.mu.Unlock()
		return false
	}
	w.waiters.Add(1)
	defer w.waiters.Done()
	w.rx.Store(rxWaiter)
	if s == rxWorker {
		w.handovers.Add(1)
	}
	// The goroutine may sleep on the link: it stops listening to it and
	// sleeps on until its deadline, when it stands by.
	w.wk.setInterest(false)
	w.mu.Unlock()
	w.wcq, w.wctx, w.werr = c, ctx, nil
	w.wdeadline, _ = ctx.Deadline()
	c.watchCancel(ctx, w)
	for !w.waiterDone() && w.werr == nil {
		w.wa.sleep(w.waiterFn)
		if time.Duration(w.deadline.Load()) <= w.d.now() {
			// The engine is waiting for transmit buffers.
			runtime.Gosched()
		}
	}
	w.wcq, w.wctx = nil, nil
	failed := w.werr != nil
	w.mu.Lock()
	w.rx.Store(rxHandback)
	if !w.stop {
		// The goroutine sleeps on: make it listen to the link again
		// (which signals at once if frames came since our last look)
		// and wake by the watcher's deadline.
		w.wk.setInterest(true)
		now := w.d.now()
		w.armGoroutineLocked(w.watcherDeadlineLocked(now), now)
	}
	w.mu.Unlock()
	// A kick that saw rxWaiter poked us, not the goroutine.
	if w.pending.Load() && w.wk.asleep.Load() {
		w.wk.poke()
	}
	return !failed
}

// waiterDone reports whether the watching waiter must return: its CQ
// holds a completion, its context is done, or the device closes.
func (w *worker) waiterDone() bool {
	return w.wcq.Len() > 0 || w.wctx.Err() != nil || w.stopping.Load()
}

// waiterReady is the waiter's callback on its watch (see watch.sleep): it
// runs rounds while frames come and returns true when the waiter must
// return, or listens to the link, arms the deadline and returns false to
// sleep.
func (w *worker) waiterReady() bool {
	x := w.wa
	x.asleep.Store(false)
	w.mu.Lock()
	var now time.Duration
	for {
		if w.stop || w.waiterDone() {
			w.mu.Unlock()
			return true
		}
		now = w.d.now()
		n, err := w.roundLocked(now, true)
		if err != nil {
			w.werr = err
			w.mu.Unlock()
			return true
		}
		if n > 0 {
			w.waiterBatches.Add(1)
			w.waiterFrames.Add(uint64(n))
			w.mu.Unlock()
			w.mu.Lock()
			continue
		}
		break
	}
	if w.d.spin > 0 {
		w.mu.Unlock()
		if w.spinWatcher(now) {
			return true
		}
		w.mu.Lock()
	}
	until := min(time.Duration(w.deadline.Load()), now+idleTick)
	if until <= now {
		w.mu.Unlock()
		return true
	}
	at := w.d.epoch.Add(until)
	if !w.wdeadline.IsZero() && w.wdeadline.Before(at) {
		at = w.wdeadline
	}
	x.arm(at)
	w.sleepUntil.Store(int64(until))
	x.asleep.Store(true)
	w.mu.Unlock()
	if w.pending.Load() || w.waiterDone() {
		x.asleep.Store(false)
		return true
	}
	return false
}

// spinWatcher polls the link for up to Config.Spin (from now) before
// the watcher sleeps, and reports whether something came.
func (w *worker) spinWatcher(now time.Duration) bool {
	end := now + w.d.spin
	for {
		if w.pending.Load() || w.stopping.Load() {
			return true
		}
		w.mu.Lock()
		now = w.d.now()
		n, _ := w.roundLocked(now, false)
		w.mu.Unlock()
		if n > 0 {
			return true
		}
		if now >= end {
			return false
		}
		runtime.Gosched()
	}
}

// goroutineReady is the worker goroutine's callback on its watch (see
// watch.sleep). As the watcher (rxWorker, or rxHandback, which it turns
// into rxWorker) it runs rounds while frames come, then listens to the
// link, arms its deadline and returns false to sleep, or true to be
// called again at once. While a waiter watches it does not listen to the
// link: woken by its deadline, it sends answers held back past heldUntil
// and sleeps again.
func (w *worker) goroutineReady() bool {
	x := w.wk
	x.asleep.Store(false)
	w.mu.Lock()
	for {
		if w.stop {
			w.mu.Unlock()
			return true
		}
		now := w.d.now()
		s := w.rx.Load()
		if s == rxPolled && w.polls == w.kPolls {
			// Nobody polled since our last look: take the link back.
			s = rxWorker
			w.rx.Store(s)
			x.setInterest(true)
		}
		if s == rxWaiter || s == rxPolled {
			w.standbys.Add(1)
			w.kPolls = w.polls
			switch {
			case s == rxPolled && w.pending.Load():
				w.roundLocked(now, false)
			case w.heldUntil <= now:
				w.flushLocked()
			}
			w.armGoroutineLocked(min(w.heldUntil, now+idleTick), now)
			x.arm(w.deadlineTime(w.kArmed))
			break
		}
		if s == rxHandback {
			w.rx.Store(rxWorker)
		}
		n, err := w.roundLocked(now, false)
		if err != nil {
			w.mu.Unlock()
			w.roundErr = err
			return true
		}
		if n > 0 {
			w.batches.Add(1)
			w.mu.Unlock()
			w.mu.Lock()
			continue
		}
		if w.d.spin > 0 {
			w.mu.Unlock()
			if w.spinWatcher(now) {
				return true
			}
			w.mu.Lock()
		}
		until := w.watcherDeadlineLocked(now)
		if until <= now {
			w.mu.Unlock()
			return true
		}
		w.armGoroutineLocked(until, now)
		x.arm(w.deadlineTime(w.kArmed))
		w.sleepUntil.Store(int64(until))
		break
	}
	x.asleep.Store(true)
	w.mu.Unlock()
	if w.pending.Load() && w.rx.Load() != rxWaiter || w.stopping.Load() {
		x.asleep.Store(false)
		return true
	}
	return false
}

// runWatch is the worker goroutine's loop over a link with a descriptor.
func (w *worker) runWatch() {
	for !w.stopping.Load() {
		w.wk.sleep(w.goroutineFn)
		if err := w.roundErr; err != nil {
			w.roundErr = nil
			if errors.Is(err, link.ErrClosed) {
				return
			}
			// A transient link error: go on after a pause, so that a
			// broken link does not spin.
			time.Sleep(time.Millisecond)
		}
		if time.Duration(w.deadline.Load()) <= w.d.now() {
			// The engine is waiting for transmit buffers.
			runtime.Gosched()
		}
	}
}

// runWait is the worker goroutine's loop over a waitLink: it runs a
// round when frames came, work was queued or a deadline passed, and
// sleeps in WaitReceive until the next of these (a kick or a hold that
// ends earlier than its sleep wakes it).
func (w *worker) runWait() {
	ready := true
	for {
		w.mu.Lock()
		if w.stop {
			w.mu.Unlock()
			return
		}
		now := w.d.now()
		if ready || w.pending.Load() || w.watcherDeadlineLocked(now) <= now {
			n, err := w.roundLocked(now, false)
			if n > 0 {
				w.mu.Unlock()
				w.batches.Add(1)
				continue
			}
			if err != nil {
				w.mu.Unlock()
				if errors.Is(err, link.ErrClosed) {
					return
				}
				time.Sleep(time.Millisecond)
				continue
			}
		}
		until := w.watcherDeadlineLocked(now)
		w.sleepUntil.Store(int64(until))
		w.sleeping.Store(true)
		w.mu.Unlock()
		ready = false
		if !w.pending.Load() && until > now {
			var err error
			if ready, err = w.waiter.WaitReceive(until - now); errors.Is(err, link.ErrClosed) {
				w.sleeping.Store(false)
				return
			}
		}
		w.sleeping.Store(false)
	}
}

// runReceive is the worker goroutine's loop over a link that has neither
// a descriptor nor WaitReceive: it sleeps in link.Receive until the
// engine's next deadline or a kick, feeds the engine what came and sends
// what is ready.
func (w *worker) runReceive() {
	for {
		w.mu.Lock()
		if w.stop {
			w.mu.Unlock()
			return
		}
		w.flushLocked()
		w.inReceive = true
		w.mu.Unlock()
		w.sleeping.Store(true)
		now := w.d.now()
		until := time.Duration(w.deadline.Load())
		if w.direct {
			// Wake at least every idleTick, so that a user call
			// that arms a later timer need not wake us.
			until = min(until, now+idleTick)
		}
		w.sleepUntil.Store(int64(until))
		timeout := time.Duration(-1)
		switch {
		case w.pending.Load(), time.Duration(w.deadline.Load()) < until:
			// Work was queued, or a user call ran the engine and may
			// not have seen sleepUntil: look again at once.
			timeout = 0
		case until != qp.Never:
			timeout = max(until-now, 0)
		}
		n, err := w.link.Receive(w.kbufs, timeout)
		w.sleeping.Store(false)
		w.mu.Lock()
		w.inReceive = false
		if w.stop {
			if n > 0 {
				w.link.Release(w.kbufs[:n])
			}
			w.mu.Unlock()
			return
		}
		if err != nil && !errors.Is(err, link.ErrClosed) {
			// A transient link error: count it and go on after a
			// pause, so that a broken link does not spin.
			w.linkErrors.Add(1)
			if n > 0 {
				w.link.Release(w.kbufs[:n])
			}
			w.mu.Unlock()
			time.Sleep(time.Millisecond)
			continue
		}
		now = w.d.now()
		if n > 0 {
			w.batches.Add(1)
			w.input(w.kbufs[:n], now)
			w.link.Release(w.kbufs[:n])
		}
		w.inputForwarded(now)
		w.pending.Store(false)
		w.deadline.Store(int64(w.eng.Poll(now)))
		w.flushLocked()
		w.afterBatch()
		w.notifyWaiterLocked()
		w.mu.Unlock()
		if errors.Is(err, link.ErrClosed) {
			return
		}
		if n > 0 {
			// Completions of this batch may have readied a user
			// goroutine on our P; let it run now rather than after
			// we block in Receive, where it would wait for the
			// runtime to take the P back.
			runtime.Gosched()
		}
	}
}

// runBusy is the worker goroutine's loop with Config.BusyPoll: rounds
// without sleeping. After an empty round it yields, so that user calls
// waiting for mu, or for the P, get them between its looks.
func (w *worker) runBusy() {
	for {
		w.mu.Lock()
		if w.stop {
			w.mu.Unlock()
			return
		}
		n, err := w.roundLocked(w.d.now(), false)
		w.mu.Unlock()
		if n > 0 {
			w.batches.Add(1)
			continue
		}
		if errors.Is(err, link.ErrClosed) {
			return
		}
		runtime.Gosched()
	}
}
