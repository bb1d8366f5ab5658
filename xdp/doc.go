// Package xdp is xroce's default datapath: AF_XDP sockets (XSKs) over a UMEM,
// written directly against the kernel's socket API (golang.org/x/sys/unix, no
// cgo, no libxdp). Each Socket serves one NIC queue and implements link.Link.
//
// The kernel interface followed here is Linux's Documentation/networking/
// af_xdp.rst and include/uapi/linux/if_xdp.h: a UMEM (an mmap'd area split
// into fixed-size chunks, registered with XDP_UMEM_REG), four single-producer
// single-consumer rings (fill and completion for the UMEM; RX and TX per
// socket) mapped with the XDP_PGOFF_* offsets, bind(2) with a sockaddr_xdp
// naming the interface and queue, and an XDP program that redirects the
// frames we want into an XSKMAP (package bpf; RoCE v2 is UDP port 4791, see
// ../shared/ROCE.md). Frames the program passes go to the kernel stack as usual.
//
// # Frame ownership
//
// Every UMEM chunk is owned by exactly one party at a time, and the package
// tracks the owner of each chunk:
//
//   - free: on the socket's free list;
//   - fill: in the fill ring, or held by the kernel until it appears on RX;
//   - rx: handed to the caller by Receive, until Release;
//   - alloc: handed to the caller by Alloc, until Transmit or Release;
//   - tx: in the TX ring, or held by the kernel until it appears on the
//     completion ring, which makes it free again.
//
// A Release or Transmit of a buffer in the wrong state (a double release, a
// buffer from another link) is refused and counted in Stats().Extra
// ("bad_release", "bad_transmit"), never allowed to corrupt the free lists.
//
// The UMEM is shared by all sockets of a Device (XDP_SHARED_UMEM), but its
// chunks are partitioned: each socket has its own range, its own fill and
// completion rings and its own free lists, so no lock is taken per frame.
// Within a socket's range, the receive chunks come first, then the transmit
// slots; a slot is one chunk, or several consecutive chunks when frames are
// longer than a chunk (multi-buffer, XDP_USE_SG), so that Alloc can still hand
// out one contiguous buffer and Transmit describes it with several
// descriptors chained by XDP_PKT_CONTD without copying. A received frame that
// spans several descriptors is copied into one buffer from a link-owned pool
// of MaxFrame-sized buffers ("rx_linearized" in Stats().Extra).
//
// # Modes
//
// Bind asks for zero-copy and falls back to copy mode (XDP_COPY) when the
// driver cannot do it (veth, for one); Info().Mode says which was chosen. The
// sockets use XDP_USE_NEED_WAKEUP: the TX ring is kicked with sendto(2) only
// when the kernel asks for it, except in copy mode where the kernel transmits
// only from within sendto, so every Transmit kicks until the ring is drained.
// Busy polling (SO_PREFER_BUSY_POLL, SO_BUSY_POLL, SO_BUSY_POLL_BUDGET) is
// optional, and so is a short spin on the RX ring before Receive sleeps in
// poll(2) (Config.Spin); see Config.
//
// # Receiving
//
// Receive waits in ppoll(2) on the socket and an eventfd that Wakeup and
// Close write. When the interface goes away the kernel unbinds the socket
// and sets ENETDOWN in SO_ERROR without waking poll; a waiting Receive checks
// for that at least once a second and then fails with that error.
//
// # Namespaces and privileges
//
// A socket binds to an interface of the network namespace of the calling
// thread: callers that use network namespaces must call Open on a locked OS
// thread inside the right namespace (for example inside internal/netns'
// Host.Do). Sockets keep working from any goroutine afterwards. Open needs
// CAP_NET_ADMIN and CAP_BPF (or root); UMEM memory counts against
// RLIMIT_MEMLOCK, which Open raises when it may.
package xdp
