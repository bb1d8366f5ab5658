package roce

import (
	"errors"
	"io"
	"testing"
	"time"
)

func TestMRKeys(t *testing.T) {
	da, _ := pipeDevices(t, 1, noFaults, Config{})
	pd, _ := da.AllocPD()
	buf := make([]byte, 10000)
	m1, err := pd.RegMR(buf, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if m1.Addr() != sliceAddr(buf) || m1.Len() != len(buf) || m1.LKey() != m1.RKey() || m1.LKey() == 0 {
		t.Fatalf("mr addr %#x len %d keys %#x/%#x", m1.Addr(), m1.Len(), m1.LKey(), m1.RKey())
	}
	// Cache hit: same region, same keys.
	m2, err := pd.RegMR(buf, AccessLocalWrite)
	if err != nil || m2 != m1 {
		t.Fatalf("second registration: %v, %p vs %p", err, m2, m1)
	}
	// Other rights or another slice: another region.
	m3, err := pd.RegMR(buf, AccessLocalWrite|AccessRemoteRead)
	if err != nil || m3 == m1 || m3.LKey() == m1.LKey() {
		t.Fatalf("registration with other rights: %v, key %#x", err, m3.LKey())
	}
	if s := da.Stats(); s.MRs != 2 || s.PinnedPages < 3 {
		t.Fatalf("%d MRs, %d pinned pages", s.MRs, s.PinnedPages)
	}
	for _, m := range []*MR{m1, m1, m3} {
		if err := m.Dereg(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m1.Dereg(); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("extra dereg: %v", err)
	}
	if s := da.Stats(); s.MRs != 0 || s.PinnedPages != 0 {
		t.Fatalf("after dereg: %d MRs, %d pinned pages", s.MRs, s.PinnedPages)
	}
	// Re-registration in the same slot changes the 8-bit key.
	m4, _ := pd.RegMR(buf, AccessLocalWrite)
	if m4.LKey() == m1.LKey() && m4.LKey() == m3.LKey() {
		t.Fatalf("re-registration kept key %#x", m4.LKey())
	}
	if m4.LKey()>>8 == m1.LKey()>>8 && m4.LKey() == m1.LKey() {
		t.Fatalf("same slot, same key %#x", m4.LKey())
	}
	mem := memory{pd}
	if _, ok := mem.Local(m1.LKey(), m1.Addr(), 1, 0); ok && m1.LKey() != m4.LKey() {
		t.Fatal("old key still works")
	}
	if b, ok := mem.Local(m4.LKey(), m4.Addr()+10, 100, AccessLocalWrite); !ok || &b[0] != &buf[10] || len(b) != 100 {
		t.Fatal("lookup inside the region failed")
	}
	for _, c := range []struct {
		name   string
		key    uint32
		addr   uint64
		n      uint32
		access Access
	}{
		{"before", m4.LKey(), m4.Addr() - 1, 2, 0},
		{"after", m4.LKey(), m4.Addr() + 9999, 2, 0},
		{"huge", m4.LKey(), m4.Addr(), 1 << 31, 0},
		{"wrong key", m4.LKey() ^ 1, m4.Addr(), 1, 0},
		{"no right", m4.LKey(), m4.Addr(), 1, AccessRemoteWrite},
	} {
		if _, ok := mem.Local(c.key, c.addr, c.n, c.access); ok {
			t.Errorf("%s: lookup succeeded", c.name)
		}
	}
	if _, ok := mem.Remote(m4.LKey(), m4.Addr(), 1, 0); ok {
		t.Error("remote access to a local-only region")
	}
	pd2, _ := da.AllocPD()
	if _, ok := (memory{pd2}).Local(m4.LKey(), m4.Addr(), 1, 0); ok {
		t.Error("region reachable from another PD")
	}
	if err := pd.Dealloc(); !errors.Is(err, ErrBusy) {
		t.Fatalf("dealloc PD with an MR: %v", err)
	}
	for _, bad := range []Access{AccessRemoteWrite, AccessRemoteAtomic, 1 << 7} {
		if _, err := pd.RegMR(buf, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("RegMR access %#x: %v, want ErrInvalid", uint32(bad), err)
		}
	}
	if _, err := pd.RegMR(nil, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("RegMR(nil): %v", err)
	}
	m4.Dereg()
	if err := pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

// Bad keys and rights give error completions, as in verbs.
func TestBadRequests(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, b := rcPair(t, da, db, 4096)
	// A local key that does not exist.
	a.qp.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{{Addr: a.mr.Addr(), Length: 10, LKey: 0x999}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	want(t, a.cq, WCRDMAWrite, WCLocProtErr)

	a, b = rcPair(t, da, db, 4096)
	// Outside the remote region.
	a.qp.PostSend(&SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 100)},
		RemoteAddr: b.mr.Addr() + 4000, RKey: b.mr.RKey()})
	want(t, a.cq, WCRDMAWrite, WCRemAccessErr)

	// Posting in the wrong state.
	c := newSide(t, da, RC, 0, nil, nil)
	if err := c.qp.PostSend(&SendWR{Opcode: WRSend}); !errors.Is(err, ErrState) {
		t.Fatalf("post send in RESET: %v, want ErrState", err)
	}
	if err := c.qp.Modify(&Attr{State: StateRTS}, AttrState); !errors.Is(err, ErrTransition) {
		t.Fatalf("RESET→RTS: %v, want ErrTransition", err)
	}
	if err := c.qp.Modify(&Attr{State: StateInit, PathMTU: MTU4096}, AttrState|AttrPathMTU); !errors.Is(err, ErrInvalidAttr) {
		t.Fatalf("path MTU above the port's: %v, want ErrInvalidAttr", err)
	}
	if err := c.qp.Destroy(); err != nil || c.qp.Destroy() != nil {
		t.Fatal("destroy twice:", err)
	}
	if err := c.qp.PostRecv(&RecvWR{}); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("post on a destroyed QP: %v", err)
	}
}

// A full CQ reports the overflow: Err, Overflows and an event.
// Registering a buffer that is registered already (the cache) versus a
// fresh registration with pinning.
func BenchmarkRegMR(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		da, _ := pipeDevices(b, 1, noFaults, Config{})
		pd, _ := da.AllocPD()
		buf := make([]byte, c.size)
		b.Run("cached/"+c.name, func(b *testing.B) {
			keep, err := pd.RegMR(buf, AccessLocalWrite)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				m, _ := pd.RegMR(buf, AccessLocalWrite)
				m.Dereg()
			}
			keep.Dereg()
		})
		b.Run("fresh/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m, err := pd.RegMR(buf, AccessLocalWrite)
				if err != nil {
					b.Fatal(err)
				}
				m.Dereg()
			}
		})
	}
}

// Dereg with many requests outstanding succeeds at once and revokes the
// key: the requests that still needed the region complete with
// LOC_PROT_ERR (the first of them, then the rest flushed), those that were
// done with it succeed, and nothing is left registered or pinned.
func TestDeregRevokesOutstanding(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, b := rcPair(t, da, db, 1<<20)
	const n = 64
	for i := range n {
		if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1<<20)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	before := da.Stats().MRs
	if err := a.mr.Dereg(); err != nil {
		t.Fatalf("dereg with requests outstanding: %v", err)
	}
	if got := da.Stats().MRs; got != before-1 {
		t.Fatalf("%d regions after Dereg, want %d", got, before-1)
	}
	ok, prot, flushed := 0, 0, 0
	for range n {
		wc := wait(t, a.cq, 20*time.Second)
		switch wc.Status {
		case WCSuccess:
			if prot+flushed > 0 {
				t.Fatalf("request %d succeeded after a failed one", wc.ID)
			}
			ok++
		case WCLocProtErr:
			prot++
		case WCWRFlushErr:
			flushed++
		default:
			t.Fatalf("request %d: %v", wc.ID, wc.Status)
		}
	}
	if prot != 1 || ok+flushed != n-1 {
		t.Fatalf("%d succeeded, %d LOC_PROT_ERR, %d flushed; want exactly one LOC_PROT_ERR", ok, prot, flushed)
	}
	if st := a.qp.State(); st != StateErr {
		t.Fatalf("QP in %v after a local protection error, want ERR", st)
	}
	if err := a.mr.Dereg(); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("second Dereg: %v, want ErrDestroyed", err)
	}
}

// TestMRReadAt has a peer WRITE into a region while its owner watches the
// last byte with Load8 and reads it with ReadAt: under -race this is the
// test that the pair is a race-free way to look at memory being written.
func TestMRReadAt(t *testing.T) {
	da, db := pipeDevices(t, 2, noFaults, Config{})
	a, b := rcPair(t, da, db, 4096)
	const n, rounds = 1500, 50
	for i := 1; i <= rounds; i++ {
		if _, err := a.mr.WriteAt([]byte{byte(i)}, n-1); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, n)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for b.mr.Load8(n-1) != byte(i) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the write never landed", i)
			}
			time.Sleep(10 * time.Microsecond)
		}
		var got [1]byte
		if k, err := b.mr.ReadAt(got[:], n-1); k != 1 || err != nil || got[0] != byte(i) {
			t.Fatalf("ReadAt = %d, %v, byte %d; want 1, nil, %d", k, err, got[0], i)
		}
		want(t, a.cq, WCRDMAWrite, WCSuccess)
	}
	p := make([]byte, 10)
	if k, err := b.mr.ReadAt(p, int64(b.mr.Len()-4)); k != 4 || !errors.Is(err, io.EOF) {
		t.Fatalf("ReadAt past the end = %d, %v; want 4, EOF", k, err)
	}
	if _, err := b.mr.ReadAt(p, -1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ReadAt(-1) = %v; want ErrInvalid", err)
	}
	if k, err := b.mr.WriteAt(p, int64(b.mr.Len()-4)); k != 0 || !errors.Is(err, ErrInvalid) {
		t.Fatalf("WriteAt past the end = %d, %v; want 0, ErrInvalid", k, err)
	}
}

// Keys: the slot index in the low bits, different bits above at every
// registration of a slot (no key comes back within many re-registrations),
// and different keys on two devices for the same history.
func TestMRKeyBits(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	buf := make([]byte, 4096)
	keys := func(d *Device) []uint32 {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		var ks []uint32
		for range 5000 {
			m, err := pd.RegMR(buf, AccessLocalWrite|AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, m.RKey())
			if err := m.Dereg(); err != nil {
				t.Fatal(err)
			}
		}
		return ks
	}
	ka, kb := keys(da), keys(db)
	seen := map[uint32]bool{}
	same := 0
	for i, k := range ka {
		if seen[k] {
			t.Fatalf("key %#x given twice in 5000 registrations of one slot", k)
		}
		seen[k] = true
		if k&da.mrs.keys.slotMask != ka[0]&da.mrs.keys.slotMask {
			t.Fatalf("key %#x: slot changed", k)
		}
		if k == kb[i] {
			same++
		}
	}
	if same > 5 {
		t.Fatalf("%d of 5000 keys equal on two devices: not unpredictable", same)
	}
}
