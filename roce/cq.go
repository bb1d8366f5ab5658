package roce

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// CQ is a completion queue (ibv_cq): a ring of work completions that the
// engine fills (from whichever goroutine runs it, see recv.go) and the
// user polls. Its methods are safe for concurrent use. A full CQ does not lose completions silently: the overflow is
// counted, Err returns ErrCQOverflow and an EventCQError is raised, and as
// in verbs the QP whose completion was lost moves to ERR (with an
// EventQPFatal): its peer sees errors rather than a silent gap.
type CQ struct {
	d *Device

	// mu guards ring, head, tail, err, nqp, dead, the armed flags and
	// the cancellation registration of Wait.
	mu         sync.Mutex
	ring       []WC
	head, tail uint64
	err        error
	nqp        int
	dead       bool
	armed      bool // Arm: signal notify at the next completion
	armedSol   bool // ArmSolicited: signal solicited at the next solicited or failed one
	// Wait pokes its watch when the latest context it was given ends;
	// the registration (context.AfterFunc) is kept for the next Wait
	// with the same context, so that a loop of Waits allocates nothing.
	cancelDone <-chan struct{}
	cancelStop func() bool
	cancelW    atomic.Pointer[worker] // the worker whose watch a waiter of this CQ sleeps on

	notify    chan struct{}
	solicited chan struct{}
	overflows atomic.Uint64
	workers   atomic.Uint64 // bit i: a QP of worker i completes here
}

// CreateCQ returns a completion queue of n entries (ibv_create_cq); 0
// means 4096.
func (d *Device) CreateCQ(n int) (*CQ, error) {
	if n == 0 {
		n = 4096
	}
	if n < 1 || n > 1<<22 {
		return nil, fmt.Errorf("create cq: %d entries: %w", n, ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("create cq: %w", ErrClosed)
	}
	c := &CQ{d: d, ring: make([]WC, n), notify: make(chan struct{}, 1), solicited: make(chan struct{}, 1)}
	d.cqs[c] = struct{}{}
	return c, nil
}

// complete adds a completion and reports whether it fit; called by the
// engine with its worker's mu held.
func (c *CQ) complete(wc *WC) bool {
	c.mu.Lock()
	if c.tail-c.head >= uint64(len(c.ring)) {
		first := c.err == nil
		c.err = ErrCQOverflow
		c.signalLocked(true)
		c.mu.Unlock()
		c.overflows.Add(1)
		if first {
			c.d.event(Event{Type: EventCQError, CQ: c})
		}
		return false
	}
	c.ring[c.tail%uint64(len(c.ring))] = *wc
	c.tail++
	c.signalLocked(wc.Solicited || wc.Status != WCSuccess)
	c.mu.Unlock()
	return true
}

// signalLocked fires the armed notifications: Arm's at any completion,
// ArmSolicited's if sol. c.mu is held.
func (c *CQ) signalLocked(sol bool) {
	if c.armed {
		c.armed = false
		select {
		case c.notify <- struct{}{}:
			c.d.readied.Store(true)
		default:
		}
	}
	if sol && c.armedSol {
		c.armedSol = false
		select {
		case c.solicited <- struct{}{}:
			c.d.readied.Store(true)
		default:
		}
	}
}

// Poll moves up to len(wcs) completions into wcs, oldest first, and
// returns how many (ibv_poll_cq). It only reads the CQ: it does not
// receive, allocate or block. A goroutine that busy-polls calls Progress
// when Poll finds nothing, so that it receives its messages itself.
func (c *CQ) Poll(wcs []WC) int {
	c.mu.Lock()
	n := 0
	for n < len(wcs) && c.head != c.tail {
		wcs[n] = c.ring[c.head%uint64(len(c.ring))]
		c.head++
		n++
	}
	c.mu.Unlock()
	return n
}

// Progress is Device.Progress for the workers of the CQ's QPs: it
// receives a batch on each of their links that no other goroutine is
// using, runs the transport and returns the number of frames it fed.
func (c *CQ) Progress() int { return c.d.progress(c.workers.Load()) }

// Len returns the number of completions waiting.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.tail - c.head)
}

// Cap returns the CQ's size.
func (c *CQ) Cap() int { return len(c.ring) }

// Err returns ErrCQOverflow once the CQ has overflowed, nil before.
func (c *CQ) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Overflows returns the number of completions lost to a full CQ.
func (c *CQ) Overflows() uint64 { return c.overflows.Load() }

// Arm arms the CQ's completion notification and returns its channel
// (ibv_req_notify_cq and the completion channel of verbs): the channel
// receives one value when a completion is added after the call, or the
// CQ overflows. As in verbs, poll after arming, since completions added
// before Arm do not fire it, and arm again after each value. A value
// left from an earlier arming is dropped. Arm has no other effect: the
// link is received from whatever the arming goroutine does. The CQ has
// one notification, which Wait uses too when it sleeps on it.
func (c *CQ) Arm() <-chan struct{} {
	c.mu.Lock()
	c.armed = true
	select {
	case <-c.notify:
	default:
	}
	c.mu.Unlock()
	return c.notify
}

// ArmSolicited is Arm with solicited_only: its channel receives a value
// when a receive completion of a message sent with SendSolicited, or a
// completion with an error, is added after the call.
func (c *CQ) ArmSolicited() <-chan struct{} {
	c.mu.Lock()
	c.armedSol = true
	select {
	case <-c.solicited:
	default:
	}
	c.mu.Unlock()
	return c.solicited
}

// Wait blocks until the CQ holds a completion, ctx is done (its error is
// returned), the CQ has overflowed (ErrCQOverflow) or the device is closed
// with nothing left to poll (ErrClosed).
//
// When the CQ's QPs all run on one worker whose link has a descriptor,
// and no other goroutine waits on that link, the calling goroutine
// becomes the link's watcher (see recv.go): it sleeps on the socket itself
// and, when the kernel wakes it, receives and runs the transport, so that
// a completion reaches it without waking another goroutine first; it
// returns the link to the worker goroutine when it returns. Otherwise it
// sleeps on the CQ's notification (Arm).
//
// Wait allocates nothing with a context that cannot be cancelled, nor in
// a loop of Waits given the same context (its cancellation is registered
// once, with context.AfterFunc).
func (c *CQ) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n, err := c.tail-c.head, c.err
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
		if c.d.isClosed() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if w := c.soleWorker(); w != nil && w.watchable() && w.waitOn(c, ctx) {
			continue
		}
		ch := c.Arm()
		if c.Len() > 0 {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.d.done:
		}
	}
}

// soleWorker returns the worker all the CQ's QPs run on, nil if they run
// on several or there are none.
func (c *CQ) soleWorker() *worker {
	m := c.workers.Load()
	if m == 0 || m&(m-1) != 0 {
		return nil
	}
	return c.d.workers[bits.TrailingZeros64(m)]
}

// watchCancel makes the end of ctx poke w's waiter watch, while a waiter
// of this CQ sleeps on it; the registration is reused across Waits with
// the same context.
func (c *CQ) watchCancel(ctx context.Context, w *worker) {
	c.cancelW.Store(w)
	if ctx.Done() == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelDone == ctx.Done() {
		return // the same cancellation (contexts that share Done end together)
	}
	if c.cancelStop != nil {
		c.cancelStop()
	}
	c.cancelDone = ctx.Done()
	c.cancelStop = context.AfterFunc(ctx, c.pokeWaiter)
}

// pokeWaiter wakes the waiter that sleeps on the watch a Wait of this CQ
// used last; a spurious poke costs that waiter one look at its CQ.
func (c *CQ) pokeWaiter() {
	if w := c.cancelW.Load(); w != nil {
		w.wa.poke()
	}
}

// Destroy frees the CQ (ibv_destroy_cq); it fails with ErrBusy while a QP
// uses it. It is idempotent.
func (c *CQ) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return nil
	}
	if c.nqp > 0 {
		return fmt.Errorf("destroy cq: used by %d QPs: %w", c.nqp, ErrBusy)
	}
	c.dead = true
	if c.cancelStop != nil {
		c.cancelStop()
		c.cancelStop, c.cancelDone = nil, nil
	}
	c.d.mu.Lock()
	delete(c.d.cqs, c)
	c.d.mu.Unlock()
	return nil
}
