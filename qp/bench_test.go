package qp

import (
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
)

// queueOut is an Output that keeps sent frames in a queue and recycles
// buffers through a free list.
type queueOut struct {
	free [][]byte
	q    [][]byte
}

func (o *queueOut) Alloc() []byte {
	if n := len(o.free); n > 0 {
		b := o.free[n-1]
		o.free = o.free[:n-1]
		return b[:cap(b)]
	}
	return make([]byte, bufSize)
}

func (o *queueOut) Send(b []byte) { o.q = append(o.q, b) }

type countCQ struct {
	n   int
	bad int
}

func (c *countCQ) Complete(wc *WC) {
	c.n++
	if wc.Status != WCSuccess {
		c.bad++
	}
}

// memPair is a requester→responder pair wired back to back in memory.
type memPair struct {
	out      [2]*queueOut
	e        [2]*Engine
	q        [2]*QP
	cq       [4]*countCQ
	now      time.Duration
	dataPkts int // frames from 0 to 1
}

func newMemPair(tb testing.TB, mtu MTU) *memPair { return newMemPairWith(tb, mtu, EngineConfig{}) }

// newMemPairWith is newMemPair with both engines configured as cfg (but
// for Out).
func newMemPairWith(tb testing.TB, mtu MTU, cfg EngineConfig) *memPair {
	p := &memPair{}
	for i := range 2 {
		p.out[i] = &queueOut{}
		cfg.Out = p.out[i]
		var err error
		if p.e[i], err = NewEngine(cfg); err != nil {
			tb.Fatal(err)
		}
		mem := newTestMem()
		mem.add(localKey, localBase, 2<<20, AccessLocalWrite)
		mem.add(remoteKey, remBase, 2<<20, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
		p.cq[2*i], p.cq[2*i+1] = &countCQ{}, &countCQ{}
		q, err := p.e[i].CreateQP(Config{Type: RC, QPN: uint32(0x100 + i), SendCQ: p.cq[2*i], RecvCQ: p.cq[2*i+1], Mem: mem,
			MaxSendWR: 256, MaxRecvWR: 256})
		if err != nil {
			tb.Fatal(err)
		}
		p.q[i] = q
	}
	for i, q := range p.q {
		for _, s := range []struct {
			a Attr
			m AttrMask
		}{
			{Attr{State: StateInit, PKey: 0xffff, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}, AttrPKey | AttrPort | AttrAccessFlags},
			{Attr{State: StateRTR, AV: simAV(i), PathMTU: mtu, DestQPN: p.q[1-i].QPN(), RQPSN: 1<<24 - 1000, MaxDestRdAtomic: 8, MinRNRTimer: 1},
				AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
			{Attr{State: StateRTS, SQPSN: 1<<24 - 1000, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 8},
				AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxRdAtomic},
		} {
			if err := q.Modify(&s.a, AttrState|s.m); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return p
}

// pump moves frames both ways until both sides are quiet.
func (p *memPair) pump() {
	for {
		moved := false
		for i := range 2 {
			p.e[i].Poll(p.now)
			o := p.out[i]
			if len(o.q) == 0 {
				continue
			}
			moved = true
			if i == 0 {
				p.dataPkts += len(o.q)
			}
			p.e[1-i].Input(o.q, p.now)
			o.free = append(o.free, o.q...)
			o.q = o.q[:0]
		}
		if !moved {
			return
		}
		p.now += time.Microsecond
	}
}

var (
	sendWR = SendWR{Opcode: WRSend, SGL: []SGE{{Addr: localBase, Length: 64, LKey: localKey}}, Flags: SendSignaled}
	recvWR = RecvWR{SGL: []SGE{{Addr: localBase, Length: 64, LKey: localKey}}}
	readWR = SendWR{Opcode: WRRDMARead, SGL: []SGE{{Addr: localBase, Length: 64 << 10, LKey: localKey}},
		RemoteAddr: remBase, RKey: remoteKey, Flags: SendSignaled}
	faddWR = SendWR{Opcode: WRAtomicFetchAdd, SGL: []SGE{{Addr: localBase + 1<<20, Length: 8, LKey: localKey}},
		RemoteAddr: remBase + 1<<20, RKey: remoteKey, CompareAdd: 1, Flags: SendSignaled}
	writeWR = SendWR{Opcode: WRRDMAWrite, SGL: []SGE{{Addr: localBase, Length: 1 << 20, LKey: localKey}},
		RemoteAddr: remBase, RKey: remoteKey, Flags: SendSignaled}
)

// sendBatch posts n 64-byte SENDs (and their receives) and runs them to
// completion.
func (p *memPair) sendBatch(n int) {
	for range n {
		_ = p.q[1].PostRecv(&recvWR)
		_ = p.q[0].PostSend(&sendWR)
	}
	p.pump()
}

func (p *memPair) writeOne() {
	_ = p.q[0].PostSend(&writeWR)
	p.pump()
}

func TestSteadyStateAllocs(t *testing.T) {
	p := newMemPair(t, MTU1024)
	p.sendBatch(64) // warm up: free lists and queues reach their size
	if a := testing.AllocsPerRun(50, func() { p.sendBatch(32) }); a != 0 {
		t.Errorf("32 SENDs of 64 bytes: %v allocations, want 0", a)
	}
	w := newMemPair(t, MTU4096)
	w.writeOne()
	if a := testing.AllocsPerRun(20, w.writeOne); a != 0 {
		t.Errorf("1 MiB WRITE: %v allocations, want 0", a)
	}
	r := newMemPair(t, MTU1024)
	readOne := func() {
		_ = r.q[0].PostSend(&readWR)
		_ = r.q[0].PostSend(&faddWR)
		r.pump()
	}
	readOne()
	if a := testing.AllocsPerRun(20, readOne); a != 0 {
		t.Errorf("64 KiB READ and FETCH_ADD: %v allocations, want 0", a)
	}
	if r.cq[0].bad != 0 || r.cq[0].n != 2*22 {
		t.Fatalf("READ/atomic completions: %d (bad %d)", r.cq[0].n, r.cq[0].bad)
	}
	if p.cq[0].bad+w.cq[0].bad != 0 || p.cq[0].n != 64+51*32 || p.cq[3].n != p.cq[0].n || w.cq[0].n != 22 {
		t.Fatalf("completions: sends %d (bad %d), receives %d, writes %d", p.cq[0].n, p.cq[0].bad, p.cq[3].n, w.cq[0].n)
	}
}

func BenchmarkSend64(b *testing.B) {
	p := newMemPair(b, MTU1024)
	p.sendBatch(64)
	p.dataPkts = 0
	b.ReportAllocs()
	b.SetBytes(64)
	b.ResetTimer()
	const batch = 64
	for i := 0; i < b.N; i += batch {
		p.sendBatch(min(batch, b.N-i))
	}
	b.ReportMetric(float64(p.dataPkts)/b.Elapsed().Seconds(), "pkts/s")
}

func BenchmarkWrite1MiB(b *testing.B) {
	p := newMemPair(b, MTU4096)
	p.writeOne()
	p.dataPkts = 0
	b.ReportAllocs()
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for range b.N {
		p.writeOne()
	}
	b.ReportMetric(float64(p.dataPkts)/b.Elapsed().Seconds(), "pkts/s")
	b.ReportMetric(float64(b.N)*(1<<20)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

// BenchmarkRequesterSend64 measures the requester alone: 64-byte SENDs
// built into recycled buffers, one coalesced ACK per 64 packets.
func BenchmarkRequesterSend64(b *testing.B) {
	p := newMemPair(b, MTU1024)
	a := p.q[0]
	out := p.out[0]
	ackf := make([][]byte, 0, 1)
	// An ACK frame from the peer, rebuilt for each batch.
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		n := min(64, b.N-i)
		for range n {
			_ = a.PostSend(&sendWR)
		}
		p.e[0].Poll(0)
		last := out.q[len(out.q)-1]
		out.free = append(out.free, out.q...)
		out.q = out.q[:0]
		// Let the responder produce the ACK for the batch's last packet.
		p.q[1].ePSN = psnOf(last)
		_ = p.q[1].PostRecv(&recvWR)
		ackf = append(ackf[:0], last)
		p.e[1].Input(ackf, 0)
		p.e[1].Poll(0)
		p.e[0].Input(p.out[1].q, 0)
		p.out[1].free = append(p.out[1].free, p.out[1].q...)
		p.out[1].q = p.out[1].q[:0]
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// BenchmarkResponderSend64 measures the responder alone: prebuilt 64-byte
// SEND ONLY frames (each with AckReq, the ACKs coalesced per batch of 64)
// are decoded, ICRC-checked, placed and completed.
func BenchmarkResponderSend64(b *testing.B) {
	p := newMemPair(b, MTU1024)
	const n = 4096
	start := p.q[1].ePSN
	for range n {
		_ = p.q[0].PostSend(&sendWR)
		if len(p.out[0].q) < n {
			p.e[0].Poll(0)
		}
		if p.q[0].sqTail-p.q[0].sqHead == uint32(len(p.q[0].sq)) || len(p.out[0].q) >= n {
			// Pretend everything was acknowledged so the requester goes on.
			p.q[0].ackThrough(p.q[0].sentPSN.Sub(1))
			p.q[0].wake()
		}
	}
	p.e[0].Poll(0)
	p.q[0].ackThrough(p.q[0].sentPSN.Sub(1))
	frames := p.out[0].q[:n]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 64 {
		k := i % n
		m := min(64, b.N-i, n-k)
		if k == 0 {
			p.q[1].ePSN = start
		}
		for range m {
			_ = p.q[1].PostRecv(&recvWR)
		}
		p.e[1].Input(frames[k:k+m], 0)
		p.e[1].Poll(0)
		o := p.out[1]
		o.free = append(o.free, o.q...)
		o.q = o.q[:0]
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
	if p.cq[3].bad != 0 || p.cq[3].n < b.N {
		b.Fatalf("%d receive completions (%d bad) for %d packets", p.cq[3].n, p.cq[3].bad, b.N)
	}
}

func psnOf(frame []byte) bth.PSN {
	var f bth.Frame
	if f.Decode(frame) != nil {
		return 0
	}
	return f.BTH.PSN()
}

// A work request built where it is posted, SGL literal included, stays on
// the caller's stack: posting copies it without keeping a pointer into it.
func TestPostSendLiteralAllocs(t *testing.T) {
	p := newMemPair(t, MTU1024)
	post := func() {
		_ = p.q[1].PostRecv(&RecvWR{ID: 2, SGL: []SGE{{Addr: localBase, Length: 64, LKey: localKey}}})
		_ = p.q[0].PostSend(&SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled,
			SGL: []SGE{{Addr: localBase, Length: 32, LKey: localKey}, {Addr: localBase + 64, Length: 32, LKey: localKey}}})
		p.pump()
	}
	post()
	if a := testing.AllocsPerRun(100, post); a != 0 {
		t.Errorf("SEND posted from literals: %v allocations, want 0", a)
	}
}
