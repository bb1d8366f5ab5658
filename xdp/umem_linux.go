//go:build linux

package xdp

import (
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// owner says who holds a UMEM chunk (or a linear buffer); see the package doc.
type owner uint8

const (
	ownFree  owner = iota // on a free list
	ownFill               // in the fill ring or in the kernel's receive path
	ownRx                 // with the caller, from Receive
	ownAlloc              // with the caller, from Alloc
	ownTx                 // in the TX ring or in the kernel until completion
)

var ownerNames = [...]string{"free", "fill", "rx", "alloc", "tx"}

func (o owner) String() string {
	if int(o) < len(ownerNames) {
		return ownerNames[o]
	}
	return fmt.Sprintf("owner(%d)", uint8(o))
}

// umem is the mmap'd packet memory shared by a Device's sockets. It is
// registered with the kernel on the first socket (XDP_UMEM_REG); the others
// bind with XDP_SHARED_UMEM. The sockets own disjoint chunk ranges, so owner
// entries are only touched by the socket whose range holds them.
type umem struct {
	mem       []byte
	base      uintptr
	frameSize uint32
	shift     uint32 // log2(frameSize)
	headroom  uint32
	owner     []owner // one per chunk

	refs atomic.Int32 // the Device and each open socket; munmap at zero
}

func newUMEM(chunks, frameSize, headroom int) (*umem, error) {
	size := chunks * frameSize
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap umem of %d bytes: %w", size, err)
	}
	u := &umem{
		mem:       mem,
		base:      memBase(mem),
		frameSize: uint32(frameSize),
		headroom:  uint32(headroom),
		owner:     make([]owner, chunks),
	}
	for 1<<u.shift < frameSize {
		u.shift++
	}
	u.refs.Store(1)
	if testHookUMEM != nil {
		testHookUMEM(u)
	}
	return u, nil
}

// register registers the UMEM on the socket fd.
func (u *umem) register(fd int) error {
	reg := unix.XDPUmemReg{
		Addr:     uint64(u.base),
		Len:      uint64(len(u.mem)),
		Size:     u.frameSize,
		Headroom: u.headroom,
	}
	if err := registerUMEM(fd, &reg); err != nil {
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("register umem of %d bytes: %w: %w", len(u.mem), ErrMemlock, err)
		}
		return classify(fmt.Sprintf("register umem of %d bytes", len(u.mem)), err)
	}
	return nil
}

func (u *umem) ref() { u.refs.Add(1) }

// unref drops a reference and unmaps the memory with the last one.
func (u *umem) unref() error {
	if u.refs.Add(-1) != 0 {
		return nil
	}
	if err := unix.Munmap(u.mem); err != nil {
		return fmt.Errorf("munmap umem: %w", err)
	}
	u.mem = nil
	return nil
}

// testHookUMEM, when set by tests, sees every UMEM made.
var testHookUMEM func(*umem)

// raiseMemlock lifts RLIMIT_MEMLOCK so that UMEM registration (and BPF maps on
// older kernels) can pin memory. Failing to raise it is not an error by
// itself: CAP_IPC_LOCK makes the limit moot, and XDP_UMEM_REG reports
// ErrMemlock when it really is too low.
func raiseMemlock() {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) != nil || lim.Cur == unix.RLIM_INFINITY {
		return
	}
	want := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if unix.Setrlimit(unix.RLIMIT_MEMLOCK, &want) == nil {
		return
	}
	if lim.Max > lim.Cur {
		want = unix.Rlimit{Cur: lim.Max, Max: lim.Max}
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &want)
	}
}
