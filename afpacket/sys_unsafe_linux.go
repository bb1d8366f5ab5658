package afpacket

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr (include/linux/socket.h): a message header and
// the byte count the kernel fills in. Go lays it out as C does on both 32-
// and 64-bit targets (Msghdr's alignment pads the tail on 64-bit).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// recvmmsg receives up to len(msgs) frames; it does not allocate.
func recvmmsg(fd int, msgs []mmsghdr, flags int) (int, unix.Errno) {
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])),
		uintptr(len(msgs)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// sendmmsg sends up to len(msgs) frames; it does not allocate.
func sendmmsg(fd int, msgs []mmsghdr, flags int) (int, unix.Errno) {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])),
		uintptr(len(msgs)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// setIov points iov at b (which must not be empty).
func setIov(iov *unix.Iovec, b []byte) {
	iov.Base = unsafe.SliceData(b)
	iov.SetLen(len(b))
}

// auxVLAN finds PACKET_AUXDATA in a received control buffer and returns the
// 802.1Q tag the kernel took off the frame, if any.
func auxVLAN(control []byte) (tci, tpid uint16, ok bool) {
	hdrLen := unix.CmsgLen(0)
	for off := 0; off+unix.SizeofCmsghdr <= len(control); {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&control[off]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || off+l > len(control) {
			return 0, 0, false
		}
		if h.Level == unix.SOL_PACKET && h.Type == unix.PACKET_AUXDATA && l >= hdrLen+sizeofAuxdata {
			aux := (*unix.TpacketAuxdata)(unsafe.Pointer(&control[off+hdrLen]))
			if aux.Status&unix.TP_STATUS_VLAN_VALID == 0 {
				return 0, 0, false
			}
			tpid = aux.Vlan_tpid
			if aux.Status&unix.TP_STATUS_VLAN_TPID_VALID == 0 || tpid == 0 {
				tpid = 0x8100
			}
			return aux.Vlan_tci, tpid, true
		}
		off += unix.CmsgSpace(l - hdrLen)
	}
	return 0, 0, false
}

// slotOf returns the index of the slot of the slab that b points into, or
// false if b does not point into the slab.
func slotOf(slab []byte, slotSize int, b []byte) (int, bool) {
	if cap(b) == 0 || len(slab) == 0 {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(slab)))
	if p < base || p >= base+uintptr(len(slab)) {
		return 0, false
	}
	return int((p - base) / uintptr(slotSize)), true
}

// sizeofAuxdata is sizeof(struct tpacket_auxdata).
const sizeofAuxdata = int(unsafe.Sizeof(unix.TpacketAuxdata{}))
