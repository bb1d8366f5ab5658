package roce

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// CQ is a completion queue (ibv_cq): a ring of work completions that the
// workers fill and the user polls. Its methods are safe for concurrent
// use. A full CQ does not lose completions silently: the overflow is
// counted, Err returns ErrCQOverflow and an EventCQError is raised, and as
// in verbs the QP whose completion was lost moves to ERR (with an
// EventQPFatal): its peer sees errors rather than a silent gap.
type CQ struct {
	d *Device

	// mu guards ring, head, tail, err, nqp and dead.
	mu         sync.Mutex
	ring       []WC
	head, tail uint64
	err        error
	nqp        int
	dead       bool

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
// workers.
func (c *CQ) complete(wc *WC) bool {
	c.mu.Lock()
	if c.tail-c.head >= uint64(len(c.ring)) {
		first := c.err == nil
		c.err = ErrCQOverflow
		c.mu.Unlock()
		c.overflows.Add(1)
		if first {
			c.d.event(Event{Type: EventCQError, CQ: c})
		}
		c.signal()
		return false
	}
	c.ring[c.tail%uint64(len(c.ring))] = *wc
	c.tail++
	c.mu.Unlock()
	c.signal()
	if wc.Solicited || wc.Status != WCSuccess {
		select {
		case c.solicited <- struct{}{}:
		default:
		}
	}
	return true
}

func (c *CQ) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Poll moves up to len(wcs) completions into wcs, oldest first, and
// returns how many (ibv_poll_cq). It does not allocate or block. When the
// CQ is empty it calls the device's Progress for the workers of its QPs
// and looks again (unless Config.NoPollProgress): a goroutine that
// busy-polls receives its messages itself.
func (c *CQ) Poll(wcs []WC) int {
	n := c.poll(wcs)
	if n == 0 && len(wcs) > 0 && !c.d.cfg.NoPollProgress && c.d.progress(c.workers.Load()) > 0 {
		n = c.poll(wcs)
	}
	return n
}

// poll is Poll without progress.
func (c *CQ) poll(wcs []WC) int {
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

// Notify returns a channel that receives a value after completions are
// added (one value for any number of them): the completion channel of
// verbs without the need to re-arm. Poll until empty after each receive.
// Call Notify each time before sleeping on the channel: it tells the
// workers that this goroutine stops polling, so that they receive (see
// Device.Progress); a channel kept from an earlier call may otherwise wait
// up to 10 ms for a message after a Poll.
func (c *CQ) Notify() <-chan struct{} {
	c.d.unpoll(c.workers.Load())
	return c.notify
}

// NotifySolicited is Notify for solicited-only notification
// (ibv_req_notify_cq with solicited_only): its channel receives a value
// after a receive completion of a message sent with SendSolicited, or a
// completion with an error.
func (c *CQ) NotifySolicited() <-chan struct{} {
	c.d.unpoll(c.workers.Load())
	return c.solicited
}

// Wait blocks until the CQ holds a completion, ctx is done (its error is
// returned), the CQ has overflowed (ErrCQOverflow) or the device is closed
// with nothing left to poll (ErrClosed).
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
		c.d.unpoll(c.workers.Load())
		select {
		case <-c.notify:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.d.done:
		}
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
	c.d.mu.Lock()
	delete(c.d.cqs, c)
	c.d.mu.Unlock()
	return nil
}
