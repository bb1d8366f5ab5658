package roce

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// waitArmed sleeps on the CQ's armed notification until it holds a
// completion: the worker goroutine receives and wakes the caller.
func waitArmed(cq *CQ) {
	for cq.Len() == 0 {
		ch := cq.Arm()
		if cq.Len() > 0 {
			return
		}
		<-ch
	}
}

// benchWrite streams RDMA WRITEs of size bytes from a to r, keeping up to
// depth of them outstanding; one operation is one WRITE.
func benchWrite(b *testing.B, a, r *side, size, depth int) {
	b.ReportAllocs()
	b.SetBytes(int64(size))
	outstanding := 0
	var wcs [16]WC
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	wr := &SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, size)}, RemoteAddr: r.mr.Addr(), RKey: r.mr.RKey()}
	reap := func() {
		for {
			n := a.cq.Poll(wcs[:])
			for _, wc := range wcs[:n] {
				if wc.Status != WCSuccess {
					b.Fatal(wc.Status)
				}
			}
			outstanding -= n
			if n > 0 {
				return
			}
			ch := a.cq.Arm()
			if a.cq.Len() > 0 {
				continue
			}
			timer.Reset(10 * time.Second)
			select {
			case <-ch:
			case <-timer.C:
				b.Fatal("no completion in 10 s")
			}
		}
	}
	for b.Loop() {
		if outstanding == depth {
			reap()
		}
		if err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		outstanding++
	}
	for outstanding > 0 {
		reap()
	}
	b.ReportMetric(float64(b.N)*float64(size)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

// Ways to wait for a completion in benchPingPong.
const (
	waitSpin = "spin" // spin on Poll and Progress, as ibv_rc_pingpong does
	waitWait = "wait" // CQ.Wait: the waiter watches the link itself where it can
	waitArm  = "arm"  // sleep on the armed notification: the worker goroutine receives
)

// benchPingPong measures the round trip of a size-byte SEND and its answer,
// each side waiting for its completions as how says.
func benchPingPong(b *testing.B, a, r *side, size int, how string) {
	b.ReportAllocs()
	for i := range 2 {
		r.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{r.mr.SGE(0, size)}})
		a.qp.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{a.mr.SGE(0, size)}})
	}
	send := func(s *side) {
		if err := s.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{s.mr.SGE(0, size)}}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	recv := func(s *side) {
		var wc [1]WC
		for i := 0; s.cq.Poll(wc[:]) == 0; i++ {
			switch how {
			case waitWait:
				if err := s.cq.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			case waitArm:
				waitArmed(s.cq)
			default:
				s.cq.Progress()
				if i == 1e8 {
					b.Fatal("no completion after 1e8 polls")
				}
			}
		}
		if wc[0].Status != WCSuccess {
			b.Fatal(wc[0].Status)
		}
		s.qp.PostRecv(&RecvWR{SGL: []SGE{s.mr.SGE(0, size)}})
	}
	for b.Loop() {
		send(a)
		recv(r)
		send(r)
		recv(a)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/roundtrip")
}

func BenchmarkPipeWrite(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			da, db := pipeDevices(b, 1, noFaults, Config{})
			a, r := rcPair(b, da, db, size)
			benchWrite(b, a, r, size, 16)
		})
	}
}

func BenchmarkPipePingPong(b *testing.B) {
	for _, how := range []string{waitWait, waitArm, waitSpin} {
		b.Run(how, func(b *testing.B) {
			da, db := pipeDevices(b, 1, noFaults, Config{})
			a, r := rcPair(b, da, db, 64)
			benchPingPong(b, a, r, 64, how)
		})
	}
}

// Steady state allocates nothing: posting, the workers' loops, the engines
// and polling the completion.
func TestSteadyStateAllocs(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, r := rcPair(t, da, db, 64<<10)
	wr := &SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64<<10)}, RemoteAddr: r.mr.Addr(), RKey: r.mr.RKey()}
	var wcs [4]WC
	op := func() {
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for a.cq.Poll(wcs[:]) == 0 {
			waitArmed(a.cq)
		}
	}
	for range 10 {
		op()
	}
	if n := testing.AllocsPerRun(200, op); n != 0 {
		t.Fatalf("%v allocations per 64 KiB WRITE", n)
	}
}

// Posting a work request built on the spot, SGL literal included,
// allocates nothing: neither roce nor the engine keeps a pointer into it.
func TestPostLiteralAllocs(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, r := rcPair(t, da, db, 4096)
	var wcs [4]WC
	op := func() {
		if err := r.qp.PostRecv(&RecvWR{ID: 7, SGL: []SGE{r.mr.SGE(0, 4096)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&SendWR{ID: 8, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 2048), a.mr.SGE(2048, 2048)}}); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < 1; {
			n += a.cq.Poll(wcs[:])
			if n == 0 {
				waitArmed(a.cq)
			}
		}
		for n := 0; n < 1; {
			n += r.cq.Poll(wcs[:])
			if n == 0 {
				waitArmed(r.cq)
			}
		}
	}
	for range 10 {
		op()
	}
	if n := testing.AllocsPerRun(200, op); n != 0 {
		t.Fatalf("%v allocations per SEND posted from literals", n)
	}
}
