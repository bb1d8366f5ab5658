// Package afpacket is a link.Link over an AF_PACKET socket (packet(7)), for
// drivers or kernels where an XDP program cannot be attached.
//
// Open binds a SOCK_RAW packet socket to one interface and attaches a
// classic BPF socket filter (Documentation/networking/filter.rst) that
// accepts RoCE v2 frames only: Ethernet, at most one 802.1Q tag, IPv4
// without options and not a fragment or IPv6 with UDP as next header, UDP
// destination port 4791 (IBTA Vol. 1 Annex A17, RoCE v2). Those are the
// rules of the XDP program in package bpf, so both links see the same
// frames. The socket is created with protocol 0, which hooks it into no
// receive path, gets its filter, and only then is bound with ETH_P_ALL, so it
// never queues a frame the filter did not see; Open still drains the queue
// once after bind. PACKET_IGNORE_OUTGOING (Linux 4.20) and a pkt_type test in
// the filter keep the host's own transmissions out.
//
// Frames move in batches: recvmmsg(2) and sendmmsg(2) over a fixed pool of
// buffers allocated at Open, so the steady state allocates nothing. The
// kernel strips an 802.1Q tag before packet taps see a frame and reports it
// in PACKET_AUXDATA; Receive puts the tag back, so callers get the frame as
// it was on the wire. Receive waits with ppoll(2) on the socket and an
// eventfd(2) that Wakeup and Close write.
//
// # Limitation: the kernel sees the frames too
//
// Unlike an XDP redirect, a packet socket receives a copy: the kernel also
// hands every RoCE datagram addressed to the host to its own UDP stack. If
// nothing listens on UDP port 4791 there, the kernel answers each one with
// an ICMP port unreachable, which a RoCE peer ignores but which costs
// bandwidth and shows up in captures. ListenDiscard binds a UDP socket on
// the port with a filter that drops every datagram, which silences those
// replies without queueing anything. When the kernel's own RoCE driver (rxe)
// is loaded on the interface it already owns the port and answers the
// frames itself: use AF_PACKET only on interfaces without rxe.
package afpacket

import (
	"errors"
	"time"
)

// Sentinel errors; errors.Is finds them in the errors Open returns.
var (
	// ErrNoInterface: the named interface does not exist (in the calling
	// thread's network namespace) or is not Ethernet.
	ErrNoInterface = errors.New("no such ethernet interface (see `ip link`)")
	// ErrPermission: the caller lacks CAP_NET_RAW.
	ErrPermission = errors.New("need CAP_NET_RAW for AF_PACKET sockets (run as root)")
	// ErrUnsupported: the kernel has no AF_PACKET sockets (CONFIG_PACKET).
	ErrUnsupported = errors.New("AF_PACKET sockets not supported by this kernel (need CONFIG_PACKET)")
	// ErrFrameSize: Transmit was given a frame shorter than an Ethernet
	// header or longer than the interface takes.
	ErrFrameSize = errors.New("frame size out of range")
	// ErrNotOwned: Transmit was given a buffer that did not come from the
	// link's Alloc or Receive or that the caller no longer owns.
	ErrNotOwned = errors.New("buffer not owned by the caller")
)

// Config configures Open. The zero value gives the defaults.
type Config struct {
	// RxFrames is the number of receive buffers; 0 means 1024.
	RxFrames int
	// TxFrames is the number of transmit buffers Alloc hands out; 0 means 1024.
	TxFrames int
	// Batch is the most frames one recvmmsg or sendmmsg moves; 0 means 64.
	Batch int
	// SocketBuffer is SO_RCVBUF and SO_SNDBUF in bytes (forced past the
	// sysctl limits with CAP_NET_ADMIN); 0 means 8 MiB.
	SocketBuffer int
	// TxWait is how long Transmit waits for room in the socket buffer or
	// the device queue before it drops the rest of a batch; 0 means 10 ms.
	TxWait time.Duration
	// QdiscBypass sends straight to the driver, skipping the interface's
	// queueing discipline (PACKET_QDISC_BYPASS): faster, but the kernel
	// then drops frames when the device queue is full.
	QdiscBypass bool
	// Outgoing makes Receive also return the RoCE v2 frames this host
	// sends on the interface, as a capture tool wants; a link that
	// transmits leaves it off so it does not read back its own frames.
	Outgoing bool
}

// Defaults of Config's zero fields.
const (
	DefaultRxFrames     = 1024
	DefaultTxFrames     = 1024
	DefaultBatch        = 64
	DefaultSocketBuffer = 8 << 20
	DefaultTxWait       = 10 * time.Millisecond
)

// Frame layout constants.
const (
	ethHeaderLen = 14
	vlanTagLen   = 4
	// headroom in front of each receive buffer, where Receive puts back the
	// 802.1Q tag the kernel took off.
	headroom = vlanTagLen
)
