//go:build linux

package xdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The four AF_XDP rings are single-producer/single-consumer queues shared
// with the kernel through mmap (Documentation/networking/af_xdp.rst). Each
// ring is a power-of-two array of entries plus a producer index, a consumer
// index and a flags word. Indexes are free-running uint32s; an entry's slot is
// index & mask. The side that produces only writes the producer index, the
// side that consumes only writes the consumer index, and both publish with
// atomic stores after writing (or before reading) the entries, which is the
// release/acquire pairing the kernel's xsk_queue.h uses.
//
// Our side keeps a cached copy of the other side's index and reads the shared
// one only when the cache says the ring looks full (producer) or empty
// (consumer), so a batch costs one atomic load and one atomic store.

// ring is the part common to all four rings.
type ring struct {
	producer *uint32 // shared with the kernel
	consumer *uint32 // shared with the kernel
	flags    *uint32 // shared with the kernel (XDP_RING_NEED_WAKEUP)
	mask     uint32
	size     uint32

	// cachedProd and cachedCons are our view of the indexes. On a ring we
	// produce to, cachedProd is our private producer index (entries
	// reserved but maybe not yet submitted) and cachedCons is the kernel's
	// consumer index plus size, so that cachedCons - cachedProd is the
	// free space. On a ring we consume from, cachedCons is our private
	// consumer index and cachedProd the last producer index we loaded.
	cachedProd uint32
	cachedCons uint32

	mem []byte // the mmap'd region, for munmap
}

// needWakeup reports whether the kernel asked to be kicked (XDP_RING_NEED_WAKEUP).
func (r *ring) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// prodFree returns how many entries can be reserved, reloading the kernel's
// consumer index only if fewer than want are known to be free.
func (r *ring) prodFree(want uint32) uint32 {
	free := r.cachedCons - r.cachedProd
	if free >= want {
		return free
	}
	r.cachedCons = atomic.LoadUint32(r.consumer) + r.size
	return r.cachedCons - r.cachedProd
}

// reserve claims up to n entries for writing and returns how many it got and
// the index of the first. The entries become visible to the kernel on submit.
func (r *ring) reserve(n uint32) (got, idx uint32) {
	free := r.prodFree(n)
	if n > free {
		n = free
	}
	idx = r.cachedProd
	r.cachedProd += n
	return n, idx
}

// submit publishes every reserved entry to the kernel.
func (r *ring) submit() {
	atomic.StoreUint32(r.producer, r.cachedProd)
}

// pending returns how many entries the kernel has produced that we have not
// consumed, reloading the producer index only when the cache shows none.
func (r *ring) pending() uint32 {
	n := r.cachedProd - r.cachedCons
	if n == 0 {
		r.cachedProd = atomic.LoadUint32(r.producer)
		n = r.cachedProd - r.cachedCons
	}
	return n
}

// refreshPending reloads the producer index unconditionally.
func (r *ring) refreshPending() uint32 {
	r.cachedProd = atomic.LoadUint32(r.producer)
	return r.cachedProd - r.cachedCons
}

// release hands n consumed entries back to the kernel.
func (r *ring) release(n uint32) {
	r.cachedCons += n
	atomic.StoreUint32(r.consumer, r.cachedCons)
}

// outstanding is, for a ring we produce to, how many submitted entries the
// kernel has not consumed yet.
func (r *ring) outstanding() uint32 {
	return r.cachedProd - atomic.LoadUint32(r.consumer)
}

// addrRing is the fill or completion ring: entries are UMEM addresses.
type addrRing struct {
	ring
	addrs []uint64
}

func (r *addrRing) set(idx uint32, addr uint64) { r.addrs[idx&r.mask] = addr }
func (r *addrRing) get(idx uint32) uint64       { return r.addrs[idx&r.mask] }

// descRing is the RX or TX ring: entries are descriptors.
type descRing struct {
	ring
	descs []unix.XDPDesc
}

func (r *descRing) at(idx uint32) *unix.XDPDesc { return &r.descs[idx&r.mask] }

// mapRing mmaps one ring of fd at pgoff and fills in r. entrySize is the size
// of one entry (8 for addresses, 16 for descriptors).
func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, n uint32, entrySize uintptr) (ring, unsafe.Pointer, error) {
	length := int(off.Desc) + int(n)*int(entrySize)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, nil, fmt.Errorf("mmap ring: %w", err)
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	r := ring{
		producer: (*uint32)(unsafe.Add(base, off.Producer)),
		consumer: (*uint32)(unsafe.Add(base, off.Consumer)),
		flags:    (*uint32)(unsafe.Add(base, off.Flags)),
		mask:     n - 1,
		size:     n,
		mem:      mem,
	}
	return r, unsafe.Add(base, off.Desc), nil
}

func mapAddrRing(fd int, pgoff int64, off unix.XDPRingOffset, n uint32, producer bool) (*addrRing, error) {
	r, entries, err := mapRing(fd, pgoff, off, n, 8)
	if err != nil {
		return nil, err
	}
	ar := &addrRing{ring: r, addrs: unsafe.Slice((*uint64)(entries), n)}
	ar.init(producer)
	return ar, nil
}

func mapDescRing(fd int, pgoff int64, off unix.XDPRingOffset, n uint32, producer bool) (*descRing, error) {
	r, entries, err := mapRing(fd, pgoff, off, n, unsafe.Sizeof(unix.XDPDesc{}))
	if err != nil {
		return nil, err
	}
	dr := &descRing{ring: r, descs: unsafe.Slice((*unix.XDPDesc)(entries), n)}
	dr.init(producer)
	return dr, nil
}

// init loads the current shared indexes into the caches.
func (r *ring) init(producer bool) {
	r.cachedProd = atomic.LoadUint32(r.producer)
	r.cachedCons = atomic.LoadUint32(r.consumer)
	if producer {
		r.cachedCons += r.size
	}
}

// unmap releases the ring's mapping; it is safe to call on a zero ring.
func (r *ring) unmap() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// setsockopt and getsockopt on SOL_XDP with a struct argument; x/sys/unix has
// no typed helpers for these.
func setsockoptPtr(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockoptPtr(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

func registerUMEM(fd int, reg *unix.XDPUmemReg) error {
	return setsockoptPtr(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(reg), unsafe.Sizeof(*reg))
}

func mmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	err := getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, err
}

func xdpStatistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	err := getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

// kick asks the kernel to process the TX ring (sendto with MSG_DONTWAIT and
// no data), without allocating.
func kick(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// kickRX asks the kernel to refill from the fill ring (or busy-poll) with
// recvfrom and MSG_DONTWAIT, without allocating.
func kickRX(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// ppoll waits on fds without allocating; ts nil waits forever.
func ppoll(fds []unix.PollFd, ts *unix.Timespec) (int, unix.Errno) {
	r, _, e := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(unsafe.SliceData(fds))), uintptr(len(fds)), uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	return int(r), e
}

// bufAddr returns the address of b's first byte (valid even when len(b) is 0
// as long as cap(b) is not).
func bufAddr(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// memBase returns the address of the first byte of an mmap'd region.
func memBase(m []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(m)))
}

// ptrOf converts a pointer to a getsockopt argument.
func ptrOf(p *uint32) unsafe.Pointer { return unsafe.Pointer(p) }
