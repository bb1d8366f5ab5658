package link

import "unsafe"

// offsetIn returns where buf starts inside arena, and false when buf does not
// point into arena. Only the pipe's ownership checks use it: a buffer handed
// back to a pipe end is identified by its address, as an AF_XDP link
// identifies a frame by its UMEM offset.
func offsetIn(arena, buf []byte) (int, bool) {
	if cap(buf) == 0 || len(arena) == 0 {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(arena)))
	if p < base || p-base >= uintptr(len(arena)) {
		return 0, false
	}
	return int(p - base), true
}
