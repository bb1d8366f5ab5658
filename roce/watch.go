package roce

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
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

// watch lets one goroutine at a time sleep on a link's descriptor, in a
// blocking ppoll(2) on the socket (or on an epoll instance holding it)
// and an eventfd, so that the kernel wakes the goroutine's thread itself
// when frames arrive, as it wakes a thread reading a socket. It does not
// use Go's netpoller, whose wake-ups measured slower on this path (see
// the message of commit 2b4ddea).
//
// A switchable watch has the socket in an epoll instance of its own, for
// POLLIN, whose interest another goroutine can switch on or off
// (setInterest, under the worker's mu): it so makes a sleeping goroutine
// start or stop listening to the link without waking it (ppoll polls the
// epoll instance, which polls readable while the interest is on and
// frames wait). Other watches poll the socket itself. Either way the
// kernel registers the sleeper with the socket only during ppoll: a
// watch costs nothing while its goroutine is awake. poke wakes the
// sleeper through the eventfd.
//
// The goroutine calls sleep with a callback that does the receive work;
// the callback runs before the goroutine sleeps and after each wake-up,
// and returns true to make sleep return; before it returns false it sets
// the sleep's deadline with arm.
type watch struct {
	sock int // the link's descriptor, not ours
	ep   int // the epoll instance
	efd  int // the eventfd poke writes
	// interest says whether sock's POLLIN is on in ep, closed that the
	// watch's descriptors are being closed; guarded by the worker's mu.
	interest, closed bool
	ev               unix.EpollEvent
	one              [8]byte
	// The sleeping goroutine's: its ppoll set, deadline (zero for
	// none), timeout and eventfd read buffer.
	pfd   [2]unix.PollFd
	until time.Time
	ts    unix.Timespec
	buf   [8]byte
	// asleep is set by the callback just before it lets the goroutine
	// sleep, and cleared when the callback runs again: a goroutine that
	// queues work for the sleeper pokes it only then.
	asleep atomic.Bool
	// yield, when set, makes the next sleep yield the processor first
	// (runtime.Gosched) and is cleared. It is the Device's readied, set
	// when a CQ notification was delivered, most often by the sleeper's
	// own receive work just before it sleeps: the goroutine it woke
	// waits in this P's run queue, and while this thread blocks in ppoll
	// with the P attached and no other P is idle to steal it, nothing
	// runs it until sysmon retakes the P, milliseconds later on a quiet
	// process. An unconditional yield would hand the P to any goroutine
	// that spins on its CQ, for a whole time slice.
	yield *atomic.Bool
	// fdMu orders pokes, which may come from any goroutine at any time
	// (a context's end), before close.
	fdMu     sync.RWMutex
	fdClosed bool
}

// newWatch makes a watch of the descriptor sock, which stays its owner's;
// switchable says whether its interest can be switched (setInterest),
// else it listens to the socket whenever it sleeps; yield is the flag
// that makes a sleep yield first (see watch.yield), nil for none.
func newWatch(sock int, switchable bool, yield *atomic.Bool) (_ *watch, err error) {
	x := &watch{sock: sock, ep: -1, efd: -1, ev: unix.EpollEvent{Fd: int32(sock)}, yield: yield}
	defer func() {
		if err != nil {
			x.close()
		}
	}()
	if x.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("watch link: eventfd: %w", err)
	}
	binary.NativeEndian.PutUint64(x.one[:], 1)
	x.pfd = [2]unix.PollFd{{Fd: int32(sock), Events: unix.POLLIN}, {Fd: int32(x.efd), Events: unix.POLLIN}}
	if switchable {
		if x.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			return nil, fmt.Errorf("watch link: epoll_create: %w", err)
		}
		if err := unix.EpollCtl(x.ep, unix.EPOLL_CTL_ADD, sock, &x.ev); err != nil {
			return nil, fmt.Errorf("watch link: epoll_ctl: %w", err)
		}
		x.pfd[0].Fd = int32(x.ep)
	}
	return x, nil
}

// setInterest switches a switchable watch's interest in the socket on or
// off. Switching it on while frames wait wakes the sleeper. The worker's
// mu is held.
func (x *watch) setInterest(on bool) {
	if x.interest == on || x.closed || x.ep < 0 {
		return
	}
	x.interest = on
	x.ev.Events = 0
	if on {
		x.ev.Events = unix.EPOLLIN
	}
	unix.EpollCtl(x.ep, unix.EPOLL_CTL_MOD, x.sock, &x.ev)
}

// arm makes the coming sleep end at t at the latest; zero for never.
// Called by the sleeping goroutine's callback.
func (x *watch) arm(t time.Time) { x.until = t }

// poke ends the current or next sleep on the watch at once.
func (x *watch) poke() {
	x.fdMu.RLock()
	if !x.fdClosed {
		unix.Write(x.efd, x.one[:])
	}
	x.fdMu.RUnlock()
}

// sleep runs ready, and sleeps until the socket polls readable (with the
// interest on), the armed deadline passes or a poke, then runs ready
// again, until ready returns true.
func (x *watch) sleep(ready func() bool) {
	for !ready() {
		if x.yield != nil && x.yield.Load() && x.yield.Swap(false) {
			runtime.Gosched()
		}
		tsp := (*unix.Timespec)(nil)
		if !x.until.IsZero() {
			d := time.Until(x.until)
			if d <= 0 {
				continue
			}
			x.ts = unix.NsecToTimespec(int64(d))
			tsp = &x.ts
		}
		x.pfd[0].Revents, x.pfd[1].Revents = 0, 0
		n, _ := unix.Ppoll(x.pfd[:], tsp, nil)
		if n > 0 && x.pfd[1].Revents != 0 {
			unix.Read(x.efd, x.buf[:]) // reset the eventfd
		}
	}
}

// close releases the watch's descriptors. Nobody may sleep on it or
// use it again, but poke.
func (x *watch) close() {
	x.fdMu.Lock()
	defer x.fdMu.Unlock()
	x.fdClosed = true
	if x.ep >= 0 {
		unix.Close(x.ep)
		x.ep = -1
	}
	if x.efd >= 0 {
		unix.Close(x.efd)
		x.efd = -1
	}
}
