package roce

import (
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/link"
)

// pipeDevicesWith returns two devices over one pipe whose directions
// have their own faults.
func pipeDevicesWith(t testing.TB, atob, btoa link.Faults, cfg Config) (*Device, *Device, *link.PipeEnd) {
	t.Helper()
	a, b := link.NewPipe(link.PipeConfig{Seed: 1, AtoB: atob, BtoA: btoa, Buffers: 2048, MACA: macA, MACB: macB})
	ca, cb := cfg, cfg
	ca.Addrs, ca.Neighbors = []netip.Addr{ipA}, map[netip.Addr]net.HardwareAddr{ipB: macB}
	cb.Addrs, cb.Neighbors = []netip.Addr{ipB}, map[netip.Addr]net.HardwareAddr{ipA: macA}
	da, err := NewDevice([]link.Link{a}, ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := NewDevice([]link.Link{b}, cb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return da, db, a
}

// ucBurst sends n UC SENDs of size bytes from a to b and reports how many
// arrived whole (UC drops a message that lost a packet) by the time a
// last, small message does.
func ucBurst(t *testing.T, a, b *side, n, size int) int {
	t.Helper()
	for i := range n + 1 {
		if err := b.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	// The marker: sent when the others have left, tiny, it arrives.
	time.Sleep(10 * time.Millisecond)
	if err := a.qp.PostSend(&SendWR{ID: 99, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	want(t, a.cq, WCSend, WCSuccess)
	got := 0
	for {
		wc := wait(t, b.cq, 20*time.Second)
		if wc.Status != WCSuccess {
			t.Fatalf("receive completion %v", wc.Status)
		}
		if wc.ByteLen == 8 {
			return got
		}
		got++
	}
}

// TestPipeRateLimitUC is the interop suite's UC problem in miniature: a
// UC sender faster than the path overruns its queue and loses messages
// that UC never sends again; the same sender held to 80% of the path's
// rate by its QP's limit loses nothing. Each case runs in a synctest
// bubble, on fake time.
func TestPipeRateLimitUC(t *testing.T) {
	const pathRate = 100_000_000 // b/s
	slow := link.Faults{Rate: pathRate, RateOverhead: 24, MaxQueueDelay: 5 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		limit int64
	}{
		{"unlimited", 0},
		{"limited", pathRate * 8 / 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				da, db, pa := pipeDevicesWith(t, slow, link.Faults{}, Config{})
				a, b := newSide(t, da, UC, 64<<10, nil, nil), newSide(t, db, UC, 64<<10, nil, nil)
				connect(t, a, b, ConnectOptions{})
				if err := a.qp.SetRateLimit(tc.limit, 16<<10); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				got := ucBurst(t, a, b, 16, 64<<10)
				took := time.Since(start)
				lost := pa.Stats().Extra["overflow"]
				t.Logf("%d of 16 messages of 64 KiB in %v, %d frames overflowed the path", got, took, lost)
				if tc.limit == 0 {
					if got == 16 || lost == 0 {
						t.Errorf("unlimited: %d of 16 arrived, %d frames overflowed; want losses", got, lost)
					}
					return
				}
				if got != 16 || lost != 0 {
					t.Errorf("limited to %d b/s: %d of 16 arrived, %d frames overflowed; want all, none", tc.limit, got, lost)
				}
				// 1 MiB and its headers at 80 Mb/s take about 110 ms, less
				// the 16 KiB burst; on fake time the pacer's schedule is
				// all there is to it, so the bound is on both sides.
				if lo, hi := 100*time.Millisecond, 120*time.Millisecond; took < lo || took > hi {
					t.Errorf("16 × 64 KiB at %d b/s took %v, want %v to %v", tc.limit, took, lo, hi)
				}
				if r := a.qp.Stats().Rate; r != uint64(tc.limit) {
					t.Errorf("QP Rate = %d, want %d", r, tc.limit)
				}
			})
		})
	}
}

// TestPipeCNP marks every frame from A CE on the wire, as a congested
// switch would: B answers with CNPs, A's DCQCN cuts its rate, and the
// transfer still completes; the counters show it on both devices.
func TestPipeCNP(t *testing.T) {
	mark := link.Faults{Drop: func(frame []byte) bool {
		bth.MarkCE(frame)
		return false
	}}
	da, db, _ := pipeDevicesWith(t, mark, link.Faults{}, Config{LineRate: 10_000_000_000})
	a, b := rcPair(t, da, db, 1<<20)
	fill(a.buf, 1)
	for i := range 4 {
		if err := a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 1<<20)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		want(t, a.cq, WCRDMAWrite, WCSuccess)
	}
	same(t, "WRITE", b.buf, a.buf)
	sa, sb := da.Stats(), db.Stats()
	qa, qb := a.qp.Stats(), b.qp.Stats()
	t.Logf("B: RxCE %d TxCNP %d; A: RxCNP %d RateCuts %d, rate %d b/s, lowest %d b/s", sb.RxCE, sb.TxCNP, sa.RxCNP, sa.RateCuts, qa.Rate, qa.RateLowest)
	if sb.RxCE == 0 || sb.TxCNP == 0 || qb.TxCNP != sb.TxCNP || sa.RxCNP != sb.TxCNP || qa.RxCNP != sa.RxCNP || sa.RxBadCNP != 0 {
		t.Errorf("CE and CNP counters: B RxCE %d TxCNP %d (QP %d), A RxCNP %d (QP %d) RxBadCNP %d", sb.RxCE, sb.TxCNP, qb.TxCNP,
			sa.RxCNP, qa.RxCNP, sa.RxBadCNP)
	}
	// The rate at the end may have recovered to the line rate (DCQCN
	// raises it again while no CNP comes, and a slow run, under the race
	// detector say, leaves it the time): the lowest one shows the cuts.
	if sa.RateCuts == 0 || qa.RateLowest == 0 || qa.RateLowest >= 10_000_000_000 {
		t.Errorf("A's DCQCN: %d cuts, lowest rate %d; want cuts below the 10 Gb/s line rate", sa.RateCuts, qa.RateLowest)
	}
	if sb.RxCE > sb.RxFrames || sa.TxCNP != 0 {
		t.Errorf("A sent %d CNPs (nothing it received was marked)", sa.TxCNP)
	}
}
