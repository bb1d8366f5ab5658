package roce

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// PD is a protection domain: memory regions and queue pairs of one PD can
// reach each other, no others. Its methods are safe for concurrent use.
type PD struct {
	d *Device

	// mu guards nqp, nmr and dead.
	mu   sync.Mutex
	nqp  int
	nmr  int
	dead bool
}

// AllocPD returns a new protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("alloc pd: %w", ErrClosed)
	}
	pd := &PD{d: d}
	d.pds[pd] = struct{}{}
	return pd, nil
}

// Dealloc frees the PD (ibv_dealloc_pd); it fails with ErrBusy while QPs or
// memory regions of the PD exist. It is idempotent.
func (pd *PD) Dealloc() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return nil
	}
	if pd.nqp > 0 || pd.nmr > 0 {
		return fmt.Errorf("dealloc pd: %d QPs and %d MRs: %w", pd.nqp, pd.nmr, ErrBusy)
	}
	pd.dead = true
	pd.d.mu.Lock()
	delete(pd.d.pds, pd)
	pd.d.mu.Unlock()
	return nil
}

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.d }

// MR is a registered memory region: a Go byte slice (or mmap'd memory)
// pinned in RAM for the region's lifetime, named by its keys. Work requests
// address it with SGE{Addr: mr.Addr()+offset, LKey: mr.LKey()}, peers with
// (mr.Addr()+offset, mr.RKey()). Its methods are safe for concurrent use.
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	key    uint32
	access Access
	slot   uint32

	refs int  // registrations sharing the region (the cache); guarded by mrTable.mu
	dead bool // guarded by mrTable.mu
}

// Addr returns the region's virtual address: the address of its first byte.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length in bytes.
func (m *MR) Len() int { return len(m.buf) }

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.buf }

// LKey returns the local key (see keys.go: a slot index in the low bits,
// unpredictable bits above it that differ at each registration).
func (m *MR) LKey() uint32 { return m.key }

// RKey returns the remote key (equal to the local key, as rxe).
func (m *MR) RKey() uint32 { return m.key }

// Access returns the region's access rights.
func (m *MR) Access() Access { return m.access }

// SGE returns a scatter/gather element of n bytes at offset off of the region.
func (m *MR) SGE(off, n int) SGE {
	return SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.key}
}

// Sync orders the caller's accesses to the region with the device's, in
// the sense of the Go memory model. The workers read and write registered
// memory when a peer's READ, WRITE or atomic arrives, and what tells the
// caller that such an operation finished (a message from the peer, often
// through the kernel) is not a synchronization the Go race detector sees.
// Call Sync after learning that a peer's one-sided operation completed and
// before reading or writing the region, and after writing data a peer will
// read or modify. Completions on a CQ need no Sync: polling one synchronizes with
// the worker that produced it. Sync waits for each worker's current batch.
// Sync does not make reading memory a peer may still be writing safe: the
// next WRITE may land while the caller reads; use ReadAt or Load8 for that.
func (m *MR) Sync() { m.pd.d.sync() }

// ReadAt copies the region's bytes from offset off into p, like
// io.ReaderAt, while no worker runs a batch: it is the race-free way to
// look at memory a peer may be writing with RDMA WRITE or atomics right
// now (a latency test polling the last byte of its buffer, a flag the
// peer sets). What it copies is a consistent snapshot with respect to the
// device's batches; a peer's message that spans several packets may be
// partly written. It takes every worker's lock for the copy, so copy
// what is needed, not the whole region, in a hot loop. It returns io.EOF
// (wrapped: errors.Is works) when off+len(p) is past the region's end,
// after copying what is there, and ErrInvalid for a negative offset.
func (m *MR) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("mr %#x: read at %d: %w", m.key, off, ErrInvalid)
	}
	if off >= int64(len(m.buf)) {
		if len(p) == 0 && off == int64(len(m.buf)) {
			return 0, nil
		}
		return 0, io.EOF
	}
	m.pd.d.lockWorkers()
	n := copy(p, m.buf[off:])
	m.pd.d.unlockWorkers()
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt copies p into the region at offset off, like io.WriterAt, while
// no worker runs a batch: the race-free way to change memory that a peer
// may be reading with RDMA READ or a worker may be sending from. It
// returns ErrInvalid, and writes nothing, when p does not fit.
func (m *MR) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.buf)) || int64(len(p)) > int64(len(m.buf))-off {
		return 0, fmt.Errorf("mr %#x: write %d bytes at %d of %d: %w", m.key, len(p), off, len(m.buf), ErrInvalid)
	}
	m.pd.d.lockWorkers()
	n := copy(m.buf[off:], p)
	m.pd.d.unlockWorkers()
	return n, nil
}

// Load8 returns the byte at offset off of the region, read as ReadAt
// reads. It panics if off is outside the region, as an index would.
func (m *MR) Load8(off int) byte {
	if off < 0 || off >= len(m.buf) {
		panic(fmt.Sprintf("roce: Load8(%d) outside a region of %d bytes", off, len(m.buf)))
	}
	m.pd.d.lockWorkers()
	b := m.buf[off]
	m.pd.d.unlockWorkers()
	return b
}

// lockWorkers takes every worker's lock, in worker order (no code holds
// one worker's lock while it takes another's, so the order cannot
// deadlock); unlockWorkers gives them back.
func (d *Device) lockWorkers() {
	for _, w := range d.workers {
		w.mu.Lock()
	}
}

func (d *Device) unlockWorkers() {
	for i := len(d.workers) - 1; i >= 0; i-- {
		d.workers[i].mu.Unlock()
	}
}

// sync waits for the batch each worker is running.
func (d *Device) sync() {
	for _, w := range d.workers {
		w.mu.Lock()
		//lint:ignore SA2001 an empty critical section is the point
		w.mu.Unlock()
	}
}

// slice returns the bytes [addr, addr+n) of the region, false if they are
// not all inside it.
func (m *MR) slice(addr uint64, n uint32) ([]byte, bool) {
	if addr < m.addr {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n) : off+uint64(n)], true
}

// mrTable holds a device's memory regions by slot, for lock-free lookup by
// the workers, and the registration cache.
type mrTable struct {
	slots []atomic.Pointer[MR]
	noPin bool
	keys  keyGen // set by init, then read-only but for its generations (mu)

	// mu guards the key generations, free, cache, the MRs' refs and
	// dead, and pins.
	mu    sync.Mutex
	free  []uint32
	cache map[mrCacheKey]*MR
	pins  pinSet
}

type mrCacheKey struct {
	pd     *PD
	addr   uint64
	n      int
	access Access
}

func (t *mrTable) init(n int, noPin bool) {
	t.slots = make([]atomic.Pointer[MR], n+1)
	t.keys.init(n)
	t.noPin = noPin
	t.cache = make(map[mrCacheKey]*MR)
	t.pins.pages = make(map[uintptr]int)
	for i := n; i >= 1; i-- { // slot 0 is never used: key 0 is invalid
		t.free = append(t.free, uint32(i))
	}
}

// lookup returns the live region key names, or nil.
func (t *mrTable) lookup(key uint32) *MR {
	i := key & t.keys.slotMask
	if i == 0 || int(i) >= len(t.slots) {
		return nil
	}
	m := t.slots[i].Load()
	if m == nil || m.key != key {
		return nil
	}
	return m
}

func (t *mrTable) counts() (mrs, pages int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.slots) - 1 - len(t.free), len(t.pins.pages)
}

// validAccess are the access flags a region may have.
const validAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// RegMR registers buf with the given access rights (ibv_reg_mr) and pins
// it (mlock) until the region is deregistered. Registering the same buffer
// with the same rights again, while it is registered, is a cache hit: it
// returns the same region (same keys) and counts one more registration, to
// be matched by one more Dereg. As verbs requires, remote write and remote
// atomic need local write.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("reg mr: empty buffer: %w", ErrInvalid)
	}
	if access&^validAccess != 0 {
		return nil, fmt.Errorf("reg mr: access %#x: %w", uint32(access), ErrInvalid)
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("reg mr: remote write or atomic without local write: %w", ErrInvalid)
	}
	d := pd.d
	t := &d.mrs
	ck := mrCacheKey{pd: pd, addr: sliceAddr(buf), n: len(buf), access: access}
	t.mu.Lock()
	defer t.mu.Unlock()
	pd.mu.Lock()
	dead := pd.dead
	pd.mu.Unlock()
	if dead {
		return nil, fmt.Errorf("reg mr: %w", ErrDestroyed)
	}
	if d.isClosed() {
		return nil, fmt.Errorf("reg mr: %w", ErrClosed)
	}
	if m := t.cache[ck]; m != nil && &m.buf[0] == &buf[0] {
		m.refs++
		return m, nil
	}
	if len(t.free) == 0 {
		return nil, fmt.Errorf("reg mr: all %d keys in use: %w", len(t.slots)-1, ErrBusy)
	}
	if !t.noPin {
		if err := t.pins.pin(buf); err != nil {
			return nil, fmt.Errorf("reg mr: %w: %w", ErrPin, err)
		}
	}
	slot := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	m := &MR{pd: pd, buf: buf, addr: ck.addr, access: access, slot: slot, key: t.keys.next(slot), refs: 1}
	t.slots[slot].Store(m)
	t.cache[ck] = m
	pd.mu.Lock()
	pd.nmr++
	pd.mu.Unlock()
	return m, nil
}

// Dereg deregisters the region (ibv_dereg_mr): once every registration of
// it is deregistered, its keys stop working and the memory is unpinned.
// When Dereg returns, no worker reads or writes the region any more, and
// none will: the key is revoked first, then Dereg waits for the batch
// each worker is running (a batch may hold a slice it resolved before).
// Every later packet resolves its bytes anew (package qp keeps keys, not
// memory), so what was in flight fails as with any invalid key: the rest
// of a peer's WRITE, a READ response not yet sent and a duplicate READ get
// a NAK Remote Access Error, and a local work request that still needed
// the region completes with LOC_PROT_ERR, as on hardware RNICs. Dereg
// never waits for the peer. Extra calls return ErrDestroyed.
func (m *MR) Dereg() error {
	d := m.pd.d
	t := &d.mrs
	t.mu.Lock()
	if m.dead {
		t.mu.Unlock()
		return fmt.Errorf("dereg mr %#x: %w", m.key, ErrDestroyed)
	}
	if m.refs > 1 {
		m.refs--
		t.mu.Unlock()
		return nil
	}
	t.removeLocked(m)
	t.mu.Unlock()
	// A worker may be in the middle of a batch with a slice of the region
	// it looked up before the key was removed: wait for its batch to end.
	if !d.isClosed() {
		d.sync()
	}
	return nil
}

func (t *mrTable) removeLocked(m *MR) {
	m.dead = true
	m.refs = 0
	t.slots[m.slot].Store(nil)
	t.free = append(t.free, m.slot)
	delete(t.cache, mrCacheKey{pd: m.pd, addr: m.addr, n: len(m.buf), access: m.access})
	if !t.noPin {
		t.pins.unpin(m.buf)
	}
	m.pd.mu.Lock()
	m.pd.nmr--
	m.pd.mu.Unlock()
}

// closeAll deregisters every region (Device.Close).
func (t *mrTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.slots {
		if m := t.slots[i].Load(); m != nil {
			t.removeLocked(m)
		}
	}
}

// memory is a PD's qp.Memory: key lookups with bounds and access checks.
type memory struct{ pd *PD }

func (mem memory) get(key uint32, addr uint64, n uint32, access Access) ([]byte, bool) {
	m := mem.pd.d.mrs.lookup(key)
	if m == nil || m.pd != mem.pd || m.access&access != access {
		return nil, false
	}
	return m.slice(addr, n)
}

// Local implements qp.Memory.
func (mem memory) Local(lkey uint32, addr uint64, n uint32, access Access) ([]byte, bool) {
	return mem.get(lkey, addr, n, access)
}

// Remote implements qp.Memory. A remote key works only on a region that
// grants some remote access.
func (mem memory) Remote(rkey uint32, addr uint64, n uint32, access Access) ([]byte, bool) {
	m := mem.pd.d.mrs.lookup(rkey)
	if m == nil || m.access&(AccessRemoteRead|AccessRemoteWrite|AccessRemoteAtomic) == 0 {
		return nil, false
	}
	return mem.get(rkey, addr, n, access)
}

// Invalidate implements qp.Memory: memory windows and invalidation are
// not supported.
func (memory) Invalidate(uint32) bool { return false }
