package netns

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread that has entered the host's network namespace
// and returns fn's error. Sockets that fn creates belong to the namespace and
// stay there for their whole life, wherever they are used afterwards.
// Goroutines that fn starts do not run in the namespace.
//
// fn runs on a new goroutine locked to its thread; that goroutine exits
// without unlocking the thread, so the Go runtime destroys the thread instead
// of ever reusing it in the wrong namespace. A panic in fn is re-raised in
// the caller's goroutine, and so is runtime.Goexit, so t.Fatal inside fn
// ends the test as usual. Do may be called from any goroutine, also
// concurrently; after Close it returns ErrClosed.
func (h *Host) Do(fn func() error) error {
	type result struct {
		err    error
		ended  bool // fn returned
		value  any  // fn's panic, if it panicked
		exited bool // fn called runtime.Goexit (t.FailNow, t.Skip)
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: see above.
		if err := h.enter(); err != nil {
			done <- result{err: err, ended: true}
			return
		}
		var r result
		defer func() {
			if !r.ended {
				if r.value = recover(); r.value == nil {
					r.exited = true
				}
			}
			done <- r
		}()
		r.err = fn()
		r.ended = true
	}()
	r := <-done
	switch {
	case r.exited:
		runtime.Goexit()
	case !r.ended:
		panic(r.value)
	}
	return r.err
}

// enter switches the calling (locked) thread into the host's namespace.
func (h *Host) enter() error {
	h.pair.mu.RLock()
	defer h.pair.mu.RUnlock()
	if h.pair.closed {
		return ErrClosed
	}
	if err := unix.Setns(int(h.ns), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("netns: enter %s: %w", h.Name, classify(err))
	}
	return nil
}

// Command returns a command that runs name with args inside the host's
// namespace (through `ip netns exec`). It works only before Close.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// SetNetem installs (or replaces) a netem qdisc as the root qdisc of the
// host's veth end, so the frames the host sends are delayed, lost, ... as
// spec says; spec is what follows `tc qdisc ... netem`, for example
// "delay 10ms 2ms loss 1% duplicate 0.5%". It returns an error wrapping
// ErrNetemUnavailable when the kernel has no netem.
func (h *Host) SetNetem(spec string) error {
	args := append([]string{"-n", h.Name, "qdisc", "replace", "dev", h.Ifname, "root", "netem"}, strings.Fields(spec)...)
	out, err := exec.Command("tc", args...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "qdisc kind is unknown") {
			return fmt.Errorf("netns: netem on %s: %w", h.Ifname, ErrNetemUnavailable)
		}
		return fmt.Errorf("netns: tc qdisc replace dev %s root netem %s: %w", h.Ifname, spec, classifyExec(err, out))
	}
	return nil
}

// ClearNetem removes the root qdisc that SetNetem installed, restoring the
// veth's default. It is not an error if there was none.
func (h *Host) ClearNetem() error {
	out, err := exec.Command("tc", "-n", h.Name, "qdisc", "del", "dev", h.Ifname, "root").CombinedOutput()
	if err != nil {
		msg := string(out)
		// The kernel answers ENOENT, or EINVAL for the default (handle 0) qdisc.
		if strings.Contains(msg, "handle of zero") || strings.Contains(msg, "No such file or directory") ||
			strings.Contains(msg, "Invalid handle") {
			return nil
		}
		return fmt.Errorf("netns: tc qdisc del dev %s root: %w", h.Ifname, classifyExec(err, out))
	}
	return nil
}

// SetMTU sets the MTU of the host's veth end and records it in h.MTU. It
// changes only this end; use Pair.SetMTU for both. It must not run
// concurrently with code reading h.MTU.
func (h *Host) SetMTU(mtu int) error {
	h.pair.mu.Lock() // exclusive: also serialises use of the netlink handle
	defer h.pair.mu.Unlock()
	if h.pair.closed {
		return ErrClosed
	}
	link := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: h.Index, Name: h.Ifname}}
	if err := h.nl.LinkSetMTU(link, mtu); err != nil {
		return fmt.Errorf("netns: set MTU %d on %s: %w", mtu, h.Ifname, classify(err))
	}
	h.MTU = mtu
	return nil
}

// SetMTU sets the MTU of both veth ends.
func (p *Pair) SetMTU(mtu int) error {
	return errors.Join(p.A.SetMTU(mtu), p.B.SetMTU(mtu))
}

// RemoveInterface deletes the host's veth end (and so its peer), as when
// a NIC goes away under the sockets bound to it. Close does not mind.
func (h *Host) RemoveInterface() error {
	return h.Do(func() error {
		l, err := netlink.LinkByName(h.Ifname)
		if err != nil {
			return err
		}
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("netns: delete %s: %w", h.Ifname, err)
		}
		return nil
	})
}
