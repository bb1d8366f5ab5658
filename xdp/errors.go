package xdp

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors for conditions the caller can act on (or a test can turn
// into a skip). Errors returned by this package wrap one of them, when one
// applies, together with the system call's errno.
var (
	// ErrNotSupported: the kernel has no AF_XDP (CONFIG_XDP_SOCKETS) or the
	// driver cannot run the XDP program; use the af_packet link instead.
	ErrNotSupported = errors.New("AF_XDP not supported by this kernel or driver (use the af_packet link)")

	// ErrPermission: creating AF_XDP sockets and loading XDP programs needs
	// CAP_NET_ADMIN and CAP_BPF (or root).
	ErrPermission = errors.New("permission denied: AF_XDP needs CAP_NET_ADMIN and CAP_BPF (run as root)")

	// ErrBusy: another socket is still bound to this queue, often one closed a
	// moment ago whose teardown the kernel has not finished; retry.
	ErrBusy = errors.New("queue busy (another AF_XDP socket holds it or is being torn down): retry")

	// ErrMemlock: the UMEM could not be pinned; raise RLIMIT_MEMLOCK
	// (ulimit -l) or grant CAP_IPC_LOCK, or ask for fewer frames.
	ErrMemlock = errors.New("cannot pin UMEM memory: raise RLIMIT_MEMLOCK (ulimit -l) or grant CAP_IPC_LOCK")

	// ErrMTU: the driver refuses an XDP program at this MTU; lower the MTU
	// or use frags (multi-buffer XDP).
	ErrMTU = errors.New("MTU too big for XDP on this driver: lower the MTU or use frags")

	// ErrNoZeroCopy: Config.Mode asked for zero-copy and the driver cannot
	// do it (veth, for one); use ModeAuto or ModeCopy.
	ErrNoZeroCopy = errors.New("zero-copy not supported by this driver: use the default mode or copy mode")

	// ErrBadBuffer: a buffer given to Transmit or Release was not from this
	// link's Alloc or Receive, or was already given back.
	ErrBadBuffer = errors.New("buffer not owned by the caller (double release or foreign buffer)")

	// ErrEmptyFrame: a buffer given to Transmit has length 0.
	ErrEmptyFrame = errors.New("empty frame")

	// ErrFrameTooLarge: a frame given to Transmit is longer than Info().MaxFrame.
	ErrFrameTooLarge = errors.New("frame longer than MaxFrame")
)

// classify wraps a system call error with the sentinel that explains it, if
// any, and the operation that failed.
func classify(op string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s: %w", op, err)
	}
	switch errno {
	case syscall.EAFNOSUPPORT, syscall.EPROTONOSUPPORT:
		return fmt.Errorf("%s: %w: %w", op, ErrNotSupported, err)
	case syscall.EPERM, syscall.EACCES:
		return fmt.Errorf("%s: %w: %w", op, ErrPermission, err)
	case syscall.EBUSY:
		return fmt.Errorf("%s: %w: %w", op, ErrBusy, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
