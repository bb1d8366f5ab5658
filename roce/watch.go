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

// watch sleeps on a link's file descriptor through Go's netpoller: a
// duplicate of the descriptor, made non-blocking and wrapped in an
// os.File, so that a goroutine waiting for frames is parked by the runtime
// and made runnable by the netpoller when the kernel signals the socket
// readable, as a goroutine reading a net.Conn is: no thread sleeps in a
// system call for it.
//
// One goroutine at a time sleeps on a watch (recv.go says which). It calls
// sleep with a callback that does the receive work; the callback runs
// before the goroutine parks and after each wake-up, and returns true to
// make sleep return. The deadline set by arm ends the sleep too (the
// engine's next timer), and poke ends it at once from any goroutine.
type watch struct {
	f  *os.File
	rc syscall.RawConn
	// armed is the deadline set on f, zero for none; owned by the
	// goroutine that sleeps on the watch.
	armed time.Time
	// asleep is set by the callback just before it lets the goroutine
	// park, and cleared when the callback runs again: a goroutine that
	// queues work for the sleeper pokes it only then.
	asleep atomic.Bool
	pokes  atomic.Uint64
}

// newWatch duplicates fd and registers the duplicate with the netpoller.
// The original descriptor is left to its owner but becomes non-blocking
// (the flag belongs to the open file both descriptors share); links that
// give their descriptor out do not block on it.
func newWatch(fd int, name string) (*watch, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup link descriptor: %w", err)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("set link descriptor non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(nfd), name)
	// A descriptor the netpoller cannot take has no deadlines.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("watch link descriptor: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("watch link descriptor: %w", err)
	}
	return &watch{f: f, rc: rc}, nil
}

// arm sets the time at which a sleep ends without frames; zero for none.
func (x *watch) arm(t time.Time) {
	if t.Equal(x.armed) {
		return
	}
	x.armed = t
	x.f.SetReadDeadline(t)
}

// longAgo is the deadline poke sets: any time in the past ends a sleep.
var longAgo = time.Unix(1, 0)

// poke ends the current or next sleep on the watch at once.
func (x *watch) poke() {
	x.pokes.Add(1)
	x.f.SetReadDeadline(longAgo)
}

// sleep runs ready, and parks the goroutine until the descriptor polls
// readable, the armed deadline passes or a poke, then runs ready again,
// until ready returns true. It returns nil then, or false and nil when
// the sleep ended on the deadline or a poke (ready then has not run since
// the wake-up), or the error that makes the descriptor unusable (the
// socket was unbound, or closed).
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

// close releases the duplicate descriptor; a sleep in progress returns
// with an error.
func (x *watch) close() error { return x.f.Close() }
