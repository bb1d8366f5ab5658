package ccsim

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/xroce/xroce/qp"
)

const ms = time.Millisecond

// staggered returns n flows starting 10 µs apart.
func staggered(n int) []Flow {
	f := make([]Flow, n)
	for i := range f {
		f[i].Start = time.Duration(i) * 10 * time.Microsecond
	}
	return f
}

// checkFair checks, in each span of the given length from `from` to the
// end of r, the flows on in it (the mask): Jain's index of their goodput
// at least 0.95, the bottleneck at least 95% used, its queue's maximum
// under maxQueue bytes.
func checkFair(t *testing.T, r *Result, from, to, span time.Duration, on []bool, maxQueue int) {
	t.Helper()
	line := float64(r.Config.LineRate)
	for at := from; at+span <= to; at += span {
		g, q, qmax := r.Mean(at, at+span)
		var act []float64
		sum := 0.0
		for i, x := range g {
			sum += x
			if on[i] {
				act = append(act, x)
			}
		}
		j := Jain(act)
		t.Logf("%v–%v: Jain %.3f over %d flows, %.2f Gb/s, queue %.0f B (max %d): %s", at, at+span, j, len(act), sum/1e9, q, qmax, gbits(g))
		if j < 0.95 {
			t.Errorf("%v–%v: Jain's index %.3f below 0.95: %s", at, at+span, j, gbits(g))
		}
		if sum < 0.95*line {
			t.Errorf("%v–%v: bottleneck carries %.2f Gb/s of %.0f", at, at+span, sum/1e9, line/1e9)
		}
		if qmax > maxQueue {
			t.Errorf("%v–%v: queue reached %d bytes, want at most %d", at, at+span, qmax, maxQueue)
		}
	}
}

func checkClean(t *testing.T, r *Result) {
	t.Helper()
	if r.Dropped != 0 || r.Retransmits != 0 || r.Errors != 0 {
		t.Errorf("%d frames dropped, %d retransmissions, %d failed writes; want none", r.Dropped, r.Retransmits, r.Errors)
	}
	if r.CNPs == 0 || r.Marked == 0 {
		t.Errorf("%d frames marked, %d CNPs: congestion control never ran", r.Marked, r.CNPs)
	}
}

func allOn(n int) []bool {
	on := make([]bool, n)
	for i := range on {
		on[i] = true
	}
	return on
}

// TestFairShare: N flows through a 10 Gb/s bottleneck that marks CE above
// 40 KB converge to equal shares with ConnectX's DCQCN defaults, the
// queue near the marking threshold, nothing lost. Fewer flows converge
// within milliseconds; eight take tens (ConnectX's additive increase is 5
// Mb/s per 300 µs).
func TestFairShare(t *testing.T) {
	for _, tc := range []struct {
		n          int
		run, after time.Duration
	}{
		{2, 30 * ms, 5 * ms},
		{4, 30 * ms, 5 * ms},
		{8, 100 * ms, 60 * ms},
	} {
		t.Run(fmt.Sprint(tc.n, " flows"), func(t *testing.T) {
			if tc.n == 8 && testing.Short() {
				t.Skip("100 ms of 8 flows: not in -short")
			}
			r, err := Run(Config{Flows: staggered(tc.n), Duration: tc.run, Window: ms})
			if err != nil {
				t.Fatal(err)
			}
			checkClean(t, r)
			checkFair(t, r, tc.after, tc.run, 5*ms, allOn(tc.n), 250_000)
			for i, c := range r.Completed {
				if c == 0 {
					t.Errorf("flow %d completed no write", i)
				}
			}
		})
	}
}

// TestJoinLeave: two flows share the bottleneck, a third joins at 20 ms
// and the first leaves at 50 ms; the shares converge again after each.
func TestJoinLeave(t *testing.T) {
	if testing.Short() {
		t.Skip("80 ms of 3 flows: not in -short")
	}
	flows := []Flow{{Stop: 50 * ms}, {Start: 10 * time.Microsecond}, {Start: 20 * ms}}
	r, err := Run(Config{Flows: flows, Duration: 80 * ms, Window: ms})
	if err != nil {
		t.Fatal(err)
	}
	checkClean(t, r)
	checkFair(t, r, 5*ms, 20*ms, 5*ms, []bool{true, true, false}, 250_000)
	checkFair(t, r, 30*ms, 50*ms, 5*ms, []bool{true, true, true}, 250_000)
	// After the first leaves, the others take its share back at
	// ConnectX's additive and hyper increase: utilisation returns in
	// about 20 ms.
	checkFair(t, r, 70*ms, 80*ms, 5*ms, []bool{false, true, true}, 250_000)
}

// TestWithoutDCQCN: the same eight flows with the reaction point off
// (CNPs are sent and ignored) fill the queue up to what their windows
// allow, 20 times DCQCN's; with a 1 MB buffer the queue overflows and
// go-back-N resends.
func TestWithoutDCQCN(t *testing.T) {
	off := qp.CCConfig{NoDCQCN: true}
	r, err := Run(Config{Flows: staggered(8), Duration: 20 * ms, Window: ms, CC: off})
	if err != nil {
		t.Fatal(err)
	}
	_, q, qmax := r.Mean(5*ms, 20*ms)
	t.Logf("without DCQCN: queue %.0f B on average, %d at most", q, qmax)
	if q < 900_000 {
		t.Errorf("without DCQCN the queue averages %.0f bytes, want the windows' 1 MB", q)
	}
	on, err := Run(Config{Flows: staggered(8), Duration: 20 * ms, Window: ms})
	if err != nil {
		t.Fatal(err)
	}
	_, qon, _ := on.Mean(5*ms, 20*ms)
	if qon*10 > q {
		t.Errorf("with DCQCN the queue averages %.0f bytes, without %.0f: want at least ten times less", qon, q)
	}
	small, err := Run(Config{Flows: staggered(8), Duration: 20 * ms, Window: ms, CC: off, Buffer: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without DCQCN, 1 MB buffer: %d frames dropped, %d retransmissions", small.Dropped, small.Retransmits)
	if small.Dropped == 0 || small.Retransmits == 0 {
		t.Errorf("without DCQCN and with a 1 MB buffer: %d dropped, %d retransmissions; want losses", small.Dropped, small.Retransmits)
	}
}

// TestDeterministic: a run depends on its Config alone.
func TestDeterministic(t *testing.T) {
	cfg := Config{Flows: staggered(3), Duration: 5 * ms, Window: 500 * time.Microsecond, Seed: 7}
	a, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("two runs of the same Config differ")
	}
}

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		x    []float64
		want float64
	}{
		{[]float64{1, 1, 1, 1}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{2, 1}, 0.9},
		{nil, 1},
	} {
		if got := Jain(tc.x); got < tc.want-1e-12 || got > tc.want+1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
}

func TestMarking(t *testing.T) {
	m := Marking{Kmin: 100, Kmax: 300, Pmax: 0.2}
	for q, want := range map[int]float64{0: 0, 100: 0, 200: 0.1, 300: 0.2, 301: 1} {
		if got := m.prob(q); got < want-1e-12 || got > want+1e-12 {
			t.Errorf("prob(%d) = %v, want %v", q, got, want)
		}
	}
}
