package roce

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestVethCongestion runs congestion control on real kernels: two devices
// over a veth pair between namespaces, AF_XDP. The receiver's XDP program
// marks a fraction of the sender's (ECT(0)) frames CE, as a congested
// switch would: the receiver answers with CNPs, the sender's DCQCN cuts
// its rate; when the marking stops, the rate recovers. A qdisc cannot do
// the marking here: AF_XDP transmit skips the sender's qdiscs, and this
// host's kernel has no sch_red.
func TestVethCongestion(t *testing.T) {
	const line = 10_000_000_000
	// ConnectX's parameters but the α period: CNPs come only as fast as
	// marked frames arrive, slowly under -race, and α updated every 1 µs
	// forgets them in between; the paper's 55 µs keeps the cuts deep
	// whatever the load.
	p := DefaultDCQCN()
	p.AlphaPeriod = 55 * time.Microsecond
	da, db, progs := vethDevices(t, Config{LineRate: line, CC: CCConfig{DCQCN: &p}}, vethOpts{steer: true})
	a, b := rcPair(t, da, db, 1<<20)

	// The sender keeps two 256 KiB WRITEs outstanding until stopped.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var failed atomic.Pointer[error] // the writer's error, if any
	var writes atomic.Int64
	go func() {
		defer wg.Done()
		var werr error
		defer func() {
			if werr != nil {
				failed.Store(&werr)
			}
		}()
		post := func(i int) error {
			return a.qp.PostSend(&SendWR{ID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{a.mr.SGE(0, 256<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		}
		for i := range 2 {
			if werr = post(i); werr != nil {
				return
			}
		}
		var wc [4]WC
		for i := 2; ctx.Err() == nil; {
			n := a.cq.Poll(wc[:])
			for _, c := range wc[:n] {
				if c.Status != WCSuccess {
					werr = wcErr(c)
					return
				}
				writes.Add(1)
				if werr = post(i); werr != nil {
					return
				}
				i++
			}
			if n == 0 {
				wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
				a.cq.Wait(wctx)
				wcancel()
			}
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()

	// sample returns the lowest and highest rates the sender's QP was
	// paced at over d (0: not limited, counted as the line rate).
	sample := func(d time.Duration) (lo, hi uint64) {
		lo = line
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			r := a.qp.Stats().Rate
			if r == 0 {
				r = line
			}
			lo, hi = min(lo, r), max(hi, r)
		}
		return lo, hi
	}
	check := func() {
		t.Helper()
		if e := failed.Load(); e != nil {
			t.Fatalf("writes: %v", *e)
		}
	}
	time.Sleep(200 * time.Millisecond)
	check()
	if r := a.qp.Stats().Rate; r != 0 {
		t.Fatalf("unmarked traffic: the sender is paced at %d b/s, want unlimited", r)
	}

	if err := progs[1].SetMarkCE(0.05); err != nil {
		t.Fatal(err)
	}
	markedLo, _ := sample(500 * time.Millisecond)
	endMarked := a.qp.Stats().Rate
	if err := progs[1].SetMarkCE(0); err != nil {
		t.Fatal(err)
	}
	_, recovered := sample(2 * time.Second)
	c, _ := progs[1].Counters()
	sa, sb := a.qp.Stats(), b.qp.Stats()
	t.Logf("%d writes of 256 KiB; %d frames marked CE; B: %d CE received, %d CNPs sent; A: %d CNPs received, %d cuts",
		writes.Load(), c.MarkedCE, sb.RxCE, sb.TxCNP, sa.RxCNP, sa.RateCuts)
	t.Logf("A's rate: lowest %d b/s while marked, %d at the end of it, highest %d in the 2 s after (%d: unlimited)",
		markedLo, endMarked, recovered, uint64(line))
	check()
	if c.MarkedCE == 0 || sb.RxCE == 0 || sb.TxCNP == 0 || sa.RxCNP != sb.TxCNP || sa.RateCuts == 0 {
		t.Errorf("marked %d, B RxCE %d TxCNP %d, A RxCNP %d cuts %d: want CNPs flowing and cuts", c.MarkedCE, sb.RxCE, sb.TxCNP,
			sa.RxCNP, sa.RateCuts)
	}
	if markedLo >= line/2 {
		t.Errorf("while marked the rate stayed at %d b/s or more, want a cut below half the line rate", markedLo)
	}
	if recovered < line*9/10 {
		t.Errorf("after the marking the rate reached %d b/s, want a recovery from %d to the line rate", recovered, markedLo)
	}
	if sa.Retransmits != 0 {
		t.Logf("note: %d retransmissions", sa.Retransmits)
	}
}

// wcErr turns a failed completion into an error for the test's goroutine.
func wcErr(wc WC) error { return &wcError{wc} }

type wcError struct{ wc WC }

func (e *wcError) Error() string { return "completion " + e.wc.Status.String() }
