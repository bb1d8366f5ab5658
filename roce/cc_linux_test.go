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
//
// It runs on real time, so it checks only what holds however slow the
// machine: the chain from marks to cuts, a lowest rate below the line
// rate, and a recovery to the line rate within a bound that only a hang
// reaches. How deep the cuts go depends on how fast CNPs arrive, that is
// on the load; TestPipeCongestion checks the depth on fake time.
func TestVethCongestion(t *testing.T) {
	const line = 10_000_000_000
	da, db, progs := vethDevices(t, Config{LineRate: line}, vethOpts{steer: true})
	a, b := rcPair(t, da, db, 1<<20)

	// The sender keeps two 256 KiB WRITEs outstanding until stopped.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var failed atomic.Pointer[error] // the writer's error, if any
	var writes atomic.Int64
	go func() {
		defer wg.Done()
		if err := keepWriting(ctx, a, b, 2, 256<<10, &writes); err != nil {
			failed.Store(&err)
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()

	check := func() {
		t.Helper()
		if e := failed.Load(); e != nil {
			t.Fatalf("writes: %v", *e)
		}
	}
	// until polls cond every 10 ms until it holds, the writer fails or
	// eventually passes; it reports whether cond held.
	until := func(cond func() bool) bool {
		t.Helper()
		for end := time.Now().Add(eventually); !cond(); time.Sleep(10 * time.Millisecond) {
			check()
			if time.Now().After(end) {
				return false
			}
		}
		return true
	}
	// Unmarked traffic: a few writes complete and nothing limits the
	// sender.
	if !until(func() bool { return writes.Load() >= 4 }) {
		t.Fatalf("%d writes of 256 KiB completed in %v, want 4", writes.Load(), eventually)
	}
	if s := a.qp.Stats(); s.Rate != 0 || s.RateCuts != 0 || s.RxCNP != 0 {
		t.Fatalf("unmarked traffic: the sender is paced at %d b/s after %d cuts, %d CNPs; want unlimited, none", s.Rate, s.RateCuts, s.RxCNP)
	}

	// Marked: frames are marked, B receives CE and sends CNPs, A receives
	// them and cuts its rate, several times, and A sends paced below the
	// line rate. (Cuts alone need not show in the rate: a sender starved
	// of CPU between a cut and its next packet finds DCQCN recovered by
	// then, and is never paced at the cut rate. While it sends, it is.)
	if err := progs[1].SetMarkCE(0.05); err != nil {
		t.Fatal(err)
	}
	const cuts = 4
	if !until(func() bool {
		s := a.qp.Stats()
		return s.RateCuts >= cuts && s.RateLowest > 0 && s.RateLowest < line
	}) {
		c, _ := progs[1].Counters()
		sa, sb := a.qp.Stats(), b.qp.Stats()
		t.Fatalf("marking for %v: marked %d, B RxCE %d TxCNP %d, A RxCNP %d cuts %d lowest rate %d; want CNPs flowing, %d cuts, a rate below the line rate",
			eventually, c.MarkedCE, sb.RxCE, sb.TxCNP, sa.RxCNP, sa.RateCuts, sa.RateLowest, cuts)
	}
	if err := progs[1].SetMarkCE(0); err != nil {
		t.Fatal(err)
	}
	marked := a.qp.Stats()

	// Unmarked again: with no CNPs DCQCN raises the rate back to the line
	// rate and releases the limiter; the CNPs of the frames marked last
	// reach A.
	recovered := until(func() bool {
		r := a.qp.Stats().Rate
		return r == 0 || r >= line*9/10
	})
	until(func() bool { return a.qp.Stats().RxCNP == b.qp.Stats().TxCNP })
	check()
	c, _ := progs[1].Counters()
	sa, sb := a.qp.Stats(), b.qp.Stats()
	t.Logf("%d writes of 256 KiB; %d frames marked CE; B: %d CE received, %d CNPs sent; A: %d CNPs received, %d cuts",
		writes.Load(), c.MarkedCE, sb.RxCE, sb.TxCNP, sa.RxCNP, sa.RateCuts)
	t.Logf("A's rate: lowest %d b/s, %d when the marking stopped, %d at the end (0: unlimited)", sa.RateLowest, marked.Rate, sa.Rate)
	if !recovered {
		t.Errorf("%v after the marking stopped the rate is %d b/s, want a recovery to the line rate", eventually, sa.Rate)
	}
	if c.MarkedCE == 0 || sb.RxCE == 0 || sb.RxCE > c.MarkedCE || sb.TxCNP == 0 || sa.RxCNP != sb.TxCNP {
		t.Errorf("marked %d, B RxCE %d TxCNP %d, A RxCNP %d: want CE received as marked, every CNP sent received", c.MarkedCE, sb.RxCE, sb.TxCNP,
			sa.RxCNP)
	}
	if sa.RateLowest == 0 || sa.RateLowest >= line {
		t.Errorf("after %d cuts the lowest rate was %d b/s, want below the line rate", sa.RateCuts, sa.RateLowest)
	}
	if sa.Retransmits != 0 {
		t.Logf("note: %d retransmissions", sa.Retransmits)
	}
}
