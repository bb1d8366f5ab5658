package roce

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sliceAddr returns the address of b's first byte. Go's collector does not
// move heap objects, and the MR keeps b reachable, so the address is the
// region's stable virtual address.
func sliceAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

var pageSize = uintptr(os.Getpagesize())

// pinSet counts the registrations covering each page, since mlock does not
// nest: a page is locked when its first region is registered and unlocked
// when its last one goes.
type pinSet struct {
	pages map[uintptr]int
}

func pageRange(b []byte) (first, end uintptr) {
	a := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a &^ (pageSize - 1), (a + uintptr(len(b)) + pageSize - 1) &^ (pageSize - 1)
}

// pin locks the pages of b not locked yet.
func (p *pinSet) pin(b []byte) error {
	first, end := pageRange(b)
	for a := first; a < end; a += pageSize {
		if p.pages[a] == 0 {
			run := a
			for run < end && p.pages[run] == 0 {
				run += pageSize
			}
			if _, _, e := unix.Syscall(unix.SYS_MLOCK, a, run-a, 0); e != 0 {
				p.unpinRange(first, a)
				return e
			}
			for x := a; x < run; x += pageSize {
				p.pages[x] = 1
			}
			a = run - pageSize
			continue
		}
		p.pages[a]++
	}
	return nil
}

// unpin drops b's references and unlocks the pages no region covers.
func (p *pinSet) unpin(b []byte) {
	first, end := pageRange(b)
	p.unpinRange(first, end)
}

func (p *pinSet) unpinRange(first, end uintptr) {
	for a := first; a < end; a += pageSize {
		if p.pages[a]--; p.pages[a] <= 0 {
			delete(p.pages, a)
			unix.Syscall(unix.SYS_MUNLOCK, a, pageSize, 0)
		}
	}
}
