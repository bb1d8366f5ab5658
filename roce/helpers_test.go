package roce

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xroce/xroce/link"
)

var noFaults link.Faults

var (
	ipA  = netip.MustParseAddr("198.18.0.1")
	ipB  = netip.MustParseAddr("198.18.0.2")
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 0x0a}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}
)

// pipeDevices returns two devices joined by n pipes (n workers each).
func pipeDevices(t testing.TB, n int, f link.Faults, cfg Config) (*Device, *Device) {
	t.Helper()
	return pipeDevicesSeed(t, n, f, cfg, 0)
}

// pipeDevicesSeed is pipeDevices with the pipes' fault seeds starting at seed+1.
func pipeDevicesSeed(t testing.TB, n int, f link.Faults, cfg Config, seed uint64) (*Device, *Device) {
	t.Helper()
	var la, lb []link.Link
	for i := range n {
		a, b := link.NewPipe(link.PipeConfig{Seed: seed + uint64(i+1), AtoB: f, BtoA: f, Buffers: 2048, MACA: macA, MACB: macB})
		la, lb = append(la, a), append(lb, b)
	}
	ca, cb := cfg, cfg
	ca.Addrs, ca.Neighbors = []netip.Addr{ipA}, map[netip.Addr]net.HardwareAddr{ipB: macB}
	cb.Addrs, cb.Neighbors = []netip.Addr{ipB}, map[netip.Addr]net.HardwareAddr{ipA: macA}
	da, err := NewDevice(la, ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := NewDevice(lb, cb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return da, db
}

// side is one end of a test connection: a PD, a CQ, a QP and a registered buffer.
type side struct {
	d   *Device
	pd  *PD
	cq  *CQ
	qp  *QP
	buf []byte
	mr  *MR
}

func newSide(t testing.TB, d *Device, typ QPType, size int, srq *SRQ, pd *PD) *side {
	t.Helper()
	s := &side{d: d, pd: pd}
	var err error
	if s.pd == nil {
		if s.pd, err = d.AllocPD(); err != nil {
			t.Fatal(err)
		}
	}
	if s.cq, err = d.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	s.qp, err = s.pd.CreateQP(QPConfig{Type: typ, SendCQ: s.cq, RecvCQ: s.cq, SRQ: srq, MaxSendWR: 256, MaxRecvWR: 256})
	if err != nil {
		t.Fatal(err)
	}
	if size > 0 {
		s.buf = make([]byte, size)
		s.mr, err = s.pd.RegMR(s.buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// connect brings a and b to RTS towards each other.
func connect(t testing.TB, a, b *side, opts ConnectOptions) {
	t.Helper()
	ctx := context.Background()
	ea, _ := a.qp.LocalEndpoint(rand.Uint32(), opts)
	eb, _ := b.qp.LocalEndpoint(rand.Uint32(), opts)
	if err := a.qp.Connect(ctx, ea, eb, opts); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(ctx, eb, ea, opts); err != nil {
		t.Fatal(err)
	}
}

// rcPair makes two connected RC sides with size-byte buffers.
func rcPair(t testing.TB, da, db *Device, size int) (*side, *side) {
	t.Helper()
	a, b := newSide(t, da, RC, size, nil, nil), newSide(t, db, RC, size, nil, nil)
	connect(t, a, b, ConnectOptions{})
	return a, b
}

// eventually bounds a real-time wait for what must happen: long enough
// that only a hang, never a slow machine, reaches it.
const eventually = 30 * time.Second

// wait polls cq until one completion arrives, within limit.
func wait(t testing.TB, cq *CQ, limit time.Duration) WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var wc [1]WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("wait for a completion: %v", err)
		}
	}
}

// want waits for a completion and checks its status and opcode.
func want(t testing.TB, cq *CQ, op WCOpcode, st WCStatus) WC {
	t.Helper()
	wc := wait(t, cq, 20*time.Second)
	if wc.Status != st || wc.Opcode != op {
		t.Fatalf("completion %v %v (id %d), want %v %v", wc.Opcode, wc.Status, wc.ID, op, st)
	}
	return wc
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func same(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from byte %d", what, len(got), i)
	}
}
