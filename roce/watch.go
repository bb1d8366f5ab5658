package roce

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fdLink is a link whose receive side can be watched through a file
// descriptor that polls readable when frames wait (an AF_XDP socket
// signals POLLIN while its RX ring holds descriptors, an AF_PACKET socket
// while it has packets queued). package xdp's Socket and package
// afpacket's Link are fdLinks; link.Pipe is not.
type fdLink interface {
	FD() int
}

// waitLink is a link without a descriptor that can wait for frames
// without taking them (link.PipeEnd): its watcher sleeps in WaitReceive
// outside the worker's lock and receives under it, as over an fdLink.
type waitLink interface {
	WaitReceive(timeout time.Duration) (bool, error)
}

// watch lets one goroutine sleep on a link's descriptor through Go's
// netpoller, as a goroutine reading a net.Conn does: no thread sleeps in a
// system call for it, and the netpoller makes it runnable when the kernel
// signals the socket readable.
//
// The socket is not given to the netpoller itself but registered, for
// POLLIN only, in a private epoll instance, and that instance (which polls
// readable when the socket does) is wrapped in an os.File. The interest in
// the socket is switched on only while the watch's goroutine sleeps or is
// about to (setInterest, under the worker's mu): a socket registered with
// the netpoller for good wakes the netpoller's thread at every frame (and,
// for POLLOUT, every transmit completion) even when no goroutine sleeps on
// it, which on a busy link costs the sender's system call an inter-
// processor wake-up per frame.
//
// The goroutine calls sleep with a callback that does the receive work;
// the callback runs before the goroutine parks and after each wake-up,
// and returns true to make sleep return. The deadline set by arm ends the
// sleep too (the engine's next timer), and poke ends it at once from any
// goroutine.
type watch struct {
	sock int // the link's descriptor, not ours
	ep   int // the epoll instance f wraps
	f    *os.File
	rc   syscall.RawConn
	// interest says whether sock's POLLIN is on in ep, closed that the
	// watch is being closed (ep must not be used); guarded by the
	// worker's mu.
	interest, closed bool
	ev               unix.EpollEvent
	evs              [1]unix.EpollEvent
	// armed is the deadline set on f, zero for none; owned by the
	// goroutine that sleeps on the watch.
	armed time.Time
	// asleep is set by the callback just before it lets the goroutine
	// park, and cleared when the callback runs again: a goroutine that
	// queues work for the sleeper pokes it only then.
	asleep atomic.Bool
}

// newWatch makes a watch of the descriptor sock, which stays its owner's.
func newWatch(sock int, name string) (_ *watch, err error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("watch link: epoll_create: %w", err)
	}
	x := &watch{sock: sock, ep: ep, ev: unix.EpollEvent{Fd: int32(sock)}}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, sock, &x.ev); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("watch link: epoll_ctl: %w", err)
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("watch link: %w", err)
	}
	x.f = os.NewFile(uintptr(ep), name)
	// A descriptor the netpoller cannot take has no deadlines.
	if err := x.f.SetReadDeadline(time.Time{}); err != nil {
		x.f.Close()
		return nil, fmt.Errorf("watch link: %w", err)
	}
	if x.rc, err = x.f.SyscallConn(); err != nil {
		x.f.Close()
		return nil, fmt.Errorf("watch link: %w", err)
	}
	return x, nil
}

// setInterest switches the watch's interest in the socket on or off.
// Switching it on while frames wait signals the watch, unless readiness
// from an earlier wake-up is still recorded in ep (clearReadiness clears
// it); a goroutine that switches its own interest on looks at the link
// once more before it sleeps. The worker's mu is held.
func (x *watch) setInterest(on bool) {
	if x.interest == on || x.closed {
		return
	}
	x.interest = on
	x.ev.Events = 0
	if on {
		x.ev.Events = unix.EPOLLIN
	}
	unix.EpollCtl(x.ep, unix.EPOLL_CTL_MOD, x.sock, &x.ev)
}

// clearReadiness drops readiness ep recorded and nobody collected, so
// that switching the interest on later signals if frames wait then. The
// interest is off; the worker's mu is held.
func (x *watch) clearReadiness() {
	if !x.closed {
		unix.EpollWait(x.ep, x.evs[:], 0)
	}
}

// arm makes a sleep end at t at the latest; a deadline armed earlier
// that has not passed by now is left alone (see armGoroutineLocked).
func (x *watch) arm(t, now time.Time) {
	if !x.armed.IsZero() && !x.armed.After(t) && x.armed.After(now) {
		return
	}
	x.armed = t
	x.f.SetReadDeadline(t)
}

// longAgo is the deadline poke sets: any time in the past ends a sleep.
var longAgo = time.Unix(1, 0)

// poke ends the current or next sleep on the watch at once.
func (x *watch) poke() {
	x.f.SetReadDeadline(longAgo)
}

// sleep runs ready, and parks the goroutine until the watch polls
// readable, the armed deadline passes or a poke, then runs ready again,
// until ready returns true. It returns true then, or false when the sleep
// ended on the deadline or a poke (ready has not run since the wake-up),
// or the error that makes the watch unusable (it was closed).
func (x *watch) sleep(ready func(uintptr) bool) (bool, error) {
	err := x.rc.Read(ready)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Read refuses to start while the deadline is past: clear it,
		// ready arms the next one.
		x.armed = time.Time{}
		x.f.SetReadDeadline(time.Time{})
		return false, nil
	}
	return false, err
}

// close releases the epoll instance; a sleep in progress returns with an
// error, and close waits for it (the worker's mu must not be held). Set
// closed first, under the worker's mu.
func (x *watch) close() error { return x.f.Close() }
