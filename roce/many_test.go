package roce

import (
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
			qa, err := pa.CreateQP(QPConfig{Type: RC, SendCQ: ca, RecvCQ: ca})
			if err != nil {
				b.Fatal(err)
			}
			qb, err := pb.CreateQP(QPConfig{Type: RC, SendCQ: cb, RecvCQ: cb})
			if err != nil {
				b.Fatal(err)
			}
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
