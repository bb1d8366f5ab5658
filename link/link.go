// Package link defines how the xroce stack moves whole Ethernet frames in and out
// of the host: in batches, through buffers whose ownership is always clear.
//
// Three links implement it:
//   - xdp (package github.com/xroce/xroce/xdp): AF_XDP sockets, the default;
//   - afpacket (package github.com/xroce/xroce/afpacket): AF_PACKET, for drivers or
//     kernels where an XDP program cannot be attached;
//   - Pipe (this package): an in-memory pair with seeded, deterministic fault
//     injection, for tests and simulations.
//
// # Buffer ownership
//
// Every buffer is owned by exactly one party at a time. A buffer returned by
// Receive belongs to the caller until it hands it back with Release. A buffer
// returned by Alloc belongs to the caller until it passes it to Transmit (which
// takes it back whatever happens) or to Release. The caller must not keep or
// touch a buffer after giving it back. Buffers are slices into memory the link
// owns (for AF_XDP, the UMEM), so they are only valid until Close.
//
// # Concurrency
//
// A Link has one owner goroutine: Alloc, Transmit, Receive and Release must be
// called from one goroutine at a time (a ConcurrentTransmitter relaxes this).
// Wakeup, Info, Stats and Close may be called from any goroutine.
package link

import (
	"errors"
	"net"
	"time"
)

// ErrClosed is returned by a Link's methods after Close.
var ErrClosed = errors.New("link closed")

// A Link sends and receives batches of whole Ethernet frames (no FCS).
type Link interface {
	// Alloc fills bufs with free transmit buffers, each of length
	// Info().MaxFrame, and returns how many it supplied: fewer than len(bufs)
	// (possibly 0) when the link has no more free buffers right now, in which
	// case the caller transmits what it has and tries again later.
	Alloc(bufs [][]byte) int

	// Transmit sends frames; len(bufs[i]) is the length of frame i and each
	// buffer must come from Alloc. The link takes back every buffer, sent or
	// not. It returns how many frames were queued for the wire; frames not
	// queued (ring full beyond what a kick could drain, frame too large) are
	// counted in Stats and dropped, and err says why when it is not a
	// transient condition.
	Transmit(bufs [][]byte) (int, error)

	// Receive waits up to timeout for at least one frame, then fills bufs
	// with as many received frames as are ready (at most len(bufs)) and
	// returns how many. A timeout of 0 polls without waiting; a negative
	// timeout waits until a frame arrives or Wakeup is called. It returns
	// 0, nil on timeout or wakeup, and 0, ErrClosed after Close.
	Receive(bufs [][]byte, timeout time.Duration) (int, error)

	// Release hands received (or allocated but unsent) buffers back to the link.
	Release(bufs [][]byte)

	// Wakeup makes a Receive waiting in another goroutine return promptly
	// (with 0 frames if none arrived). A Wakeup with no Receive waiting makes
	// the next Receive return without waiting.
	Wakeup()

	// Info describes the link; it does not change after the link is opened.
	Info() Info

	// Stats returns a snapshot of the link's counters.
	Stats() Stats

	// Close releases everything the link holds. It is idempotent.
	Close() error
}

// ConcurrentTransmitter is the optional capability of a Link whose Alloc,
// Transmit and Release may be called by one goroutine while the owner waits
// in Receive (AF_XDP sockets allow it): the caller can then send at once
// instead of waking the owner to send for it. A wrapper around a Link
// implements it by asking the link it wraps, so that wrapping does not
// change how frames are sent.
type ConcurrentTransmitter interface {
	// ConcurrentTransmit reports whether the link allows it.
	ConcurrentTransmit() bool
}

// ConcurrentTransmit reports whether l is a ConcurrentTransmitter that
// allows transmitting while its owner waits in Receive.
func ConcurrentTransmit(l Link) bool {
	c, ok := l.(ConcurrentTransmitter)
	return ok && c.ConcurrentTransmit()
}

// Info describes an open link.
type Info struct {
	Kind     string           // "af_xdp", "af_packet" or "pipe"
	Mode     string           // how it runs, e.g. "zero-copy", "copy", "driver", "generic"
	Name     string           // network interface name (or the pipe end's name)
	Index    int              // interface index, 0 for a pipe
	Queue    int              // NIC queue the link serves
	MAC      net.HardwareAddr // the interface's Ethernet address
	MTU      int              // the interface's MTU (IP packet size, without Ethernet header)
	MaxFrame int              // largest frame, Ethernet header included, that Transmit accepts
}

// Stats are a link's counters since it was opened.
type Stats struct {
	RxFrames uint64 // frames handed to the caller by Receive
	RxBytes  uint64
	TxFrames uint64 // frames queued for the wire by Transmit
	TxBytes  uint64

	RxDropped   uint64 // frames the link or kernel dropped on receive (no buffer, ring full, invalid)
	TxDropped   uint64 // frames Transmit could not queue (ring full, too large, error)
	TxNoBuffers uint64 // Alloc calls that came back short
	Wakeups     uint64 // kernel wakeups (sendto/poll kicks) the link issued

	// Kind-specific counters by name, for example the kernel's XDP_STATISTICS
	// ("rx_ring_full", "rx_fill_ring_empty", ...) or the pipe's injected faults
	// ("lost", "duplicated", ...). May be nil.
	Extra map[string]uint64
}
