package roce

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"
)

// BenchmarkQPMemory reports the heap bytes of an RC QP on the device:
// idle (created and connected with the default depths, 128 send and 128
// receive requests of 4 SGEs, and 16 READ/atomic resources) and active
// (after bursts of 16 WRITEs of 4 KiB each way: the send ring grown to
// what it held).
func BenchmarkQPMemory(b *testing.B) {
	const nqp = 1000
	da, db := pipeDevices(b, 1, noFaults, Config{})
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	ca, _ := da.CreateCQ(4 * nqp)
	cb, _ := db.CreateCQ(4 * nqp)
	bufA, bufB := make([]byte, 4096), make([]byte, 4096)
	mra, _ := pa.RegMR(bufA, AccessLocalWrite|AccessRemoteWrite)
	mrb, _ := pb.RegMR(bufB, AccessLocalWrite|AccessRemoteWrite)
	for b.Loop() {
		runtime.GC()
		var m0, m1, m2 runtime.MemStats
		runtime.ReadMemStats(&m0)
		var as, bs []*QP
		for range nqp {
			qa, qb := rcQPs(b, pa, pb, ca, cb)
			connect(b, &side{qp: qa}, &side{qp: qb}, ConnectOptions{MaxRdAtomic: 16, MaxDestRdAtomic: 16})
			as, bs = append(as, qa), append(bs, qb)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		const burst = 16
		for i := range nqp {
			for _, p := range [][2]*QP{{as[i], bs[i]}, {bs[i], as[i]}} {
				mr, peer := mra, mrb
				if p[0] == bs[i] {
					mr, peer = mrb, mra
				}
				for k := range burst {
					wr := SendWR{Opcode: WRRDMAWrite, SGL: []SGE{mr.SGE(0, 4096)}, RemoteAddr: peer.Addr(), RKey: peer.RKey()}
					if k == burst-1 {
						wr.Flags = SendSignaled
					}
					if err := p[0].PostSend(&wr); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		for _, cq := range []*CQ{ca, cb} {
			for got := 0; got < nqp; {
				w := wait(b, cq, 20*time.Second)
				if w.Status != WCSuccess {
					b.Fatalf("completion %v", w.Status)
				}
				got++
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&m2)
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/(2*nqp), "B/idle-QP")
		b.ReportMetric(float64(int64(m2.HeapAlloc)-int64(m0.HeapAlloc))/(2*nqp), "B/active-QP")
		for i := range nqp {
			as[i].Destroy()
			bs[i].Destroy()
		}
	}
}

// shareLink connects nqp RC QP pairs between da and db and has each of
// da's QPs WRITE msgs messages of size bytes to its peer, all posted at
// once: every one must complete, within a bound that a stall would pass,
// and every byte must land.
func shareLink(t *testing.T, da, db *Device, nqp, msgs, size int, opts ConnectOptions) {
	t.Helper()
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	cqa, err := da.CreateCQ(nqp * msgs)
	if err != nil {
		t.Fatal(err)
	}
	cqb, _ := db.CreateCQ(1)
	total := nqp * msgs * size
	src, dst := make([]byte, total), make([]byte, total)
	fill(src, uint64(nqp))
	mra, err := pa.RegMR(src, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	mrb, err := pb.RegMR(dst, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	qps := make([]*QP, nqp)
	for i := range qps {
		a, err := pa.CreateQP(QPConfig{Type: RC, SendCQ: cqa, RecvCQ: cqa, MaxSendWR: msgs, MaxRecvWR: 1, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := pb.CreateQP(QPConfig{Type: RC, SendCQ: cqb, RecvCQ: cqb, MaxSendWR: 1, MaxRecvWR: 1, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		connect(t, &side{qp: a}, &side{qp: b}, opts)
		qps[i] = a
	}
	for i, q := range qps {
		for k := range msgs {
			off := (i*msgs + k) * size
			if err := q.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{mra.SGE(off, size)},
				RemoteAddr: mrb.Addr() + uint64(off), RKey: mrb.RKey()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := make([]int, nqp)
	for n := 0; n < nqp*msgs; n++ {
		wc := wait(t, cqa, 20*time.Second)
		if wc.Status != WCSuccess {
			t.Fatalf("QP %d: %v after %d of %d completions", wc.ID, wc.Status, n, nqp*msgs)
		}
		done[wc.ID]++
	}
	for i, n := range done {
		if n != msgs {
			t.Fatalf("QP %d: %d completions, want %d", i, n, msgs)
		}
	}
	mrb.Sync()
	same(t, "the peer's memory", dst, src)
	s := da.Stats()
	t.Logf("%d QPs x %d x %d B: %d frames sent, %d timeouts, %d retransmissions", nqp, msgs, size, s.TxFrames, s.Timeouts, s.Retransmits)
}

// TestPipeThousandsOfQPs: 4096 QPs with a full window each share one
// link (issue 20). The pipe loses nothing but what overflows its 2048
// buffers a side, and the transmit budget keeps that from happening: not
// one frame may need sending again. (Without the budget it stalls: no completion for 20 s.)
// The ACK timeout is 4 s, so that a slow or loaded machine cannot time
// out; only a lost frame makes a retransmission.

func TestPipeThousandsOfQPs(t *testing.T) {
	nqp := 4096
	if testing.Short() {
		nqp = 512
	}
	da, db := pipeDevices(t, 1, noFaults, Config{})
	shareLink(t, da, db, nqp, 4, 32<<10, ConnectOptions{Timeout: 20}) // 128 packets a QP: a full window each
	if s := da.Stats(); s.Retransmits != 0 || s.Timeouts != 0 {
		t.Errorf("%d retransmissions, %d timeouts on a link that drops only what overflows: want none", s.Retransmits, s.Timeouts)
	}
}

// BenchmarkConnectTCP reports how many QP pairs a second are created and
// brought to RTS through the TCP exchange (ConnectTCP, XroceCodec), both
// ends in this process over an in-memory connection: the exchange's and
// the devices' cost, without a network's round trip.
func BenchmarkConnectTCP(b *testing.B) {
	da, db := pipeDevices(b, 1, noFaults, Config{})
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	ca, _ := da.CreateCQ(16)
	cb, _ := db.CreateCQ(16)
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	ctx := context.Background()
	var qps []*QP
	for b.Loop() {
		qa, qb := rcQPs(b, pa, pb, ca, cb)
		ea, _ := qa.LocalEndpoint(1, ConnectOptions{})
		eb, _ := qb.LocalEndpoint(2, ConnectOptions{})
		errc := make(chan error, 1)
		go func() {
			_, err := qb.ConnectTCP(ctx, c2, false, eb, XroceCodec, ConnectOptions{})
			errc <- err
		}()
		if _, err := qa.ConnectTCP(ctx, c1, true, ea, XroceCodec, ConnectOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		qps = append(qps, qa, qb)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	for _, q := range qps {
		q.Destroy()
	}
}

// rcQPs creates an RC QP with the default depths in pa and one in pb.
func rcQPs(tb testing.TB, pa, pb *PD, ca, cb *CQ) (qa, qb *QP) {
	tb.Helper()
	qa, err := pa.CreateQP(QPConfig{Type: RC, SendCQ: ca, RecvCQ: ca})
	if err != nil {
		tb.Fatal(err)
	}
	if qb, err = pb.CreateQP(QPConfig{Type: RC, SendCQ: cb, RecvCQ: cb}); err != nil {
		tb.Fatal(err)
	}
	return qa, qb
}
