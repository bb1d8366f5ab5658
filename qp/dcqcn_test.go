package qp

import (
	"math"
	"testing"
	"time"
)

const gbps = 1_000_000_000

// decay is ConnectX's default α weight, dce_tcp_g/1024.
const decay = 1019.0 / 1024

// limitedDCQCN returns a DCQCN on a 100 Gb/s port whose limiter was
// allocated by a CNP at time 0.
func limitedDCQCN(p *DCQCNParams) DCQCN {
	d := NewDCQCN(p, 100*gbps)
	d.OnCNP(0)
	return d
}

func TestDCQCNFirstCNP(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tune  func(*DCQCNParams)
		at4us float64 // RC at the first monitor tick
	}{
		// isekai: the first CNP only allocates the limiter.
		{"allocate only", nil, 100 * gbps},
		// hpcc: it also cuts at the first monitor tick, with α decayed
		// over the 4 α periods since: 1023·(1019/1024)⁴ ≈ 1003.1.
		{"cut on first", func(p *DCQCNParams) { p.CutOnFirstCNP = true }, 100 * gbps * (1 - 1023*math.Pow(decay, 4)/2048)},
		// rate_to_set_on_first_cnp
		{"first rate", func(p *DCQCNParams) { p.FirstCNPRate = 25 * gbps }, 25 * gbps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultDCQCN()
			if tc.tune != nil {
				tc.tune(&p)
			}
			d := NewDCQCN(&p, 100*gbps)
			if d.Limited() || d.Rate() != 0 {
				t.Fatalf("new DCQCN: limited %v rate %d, want unlimited", d.Limited(), d.Rate())
			}
			d.OnCNP(0)
			if !d.Limited() || d.Alpha() != 1023 {
				t.Fatalf("after the first CNP: limited %v α %d, want limited, 1023", d.Limited(), d.Alpha())
			}
			d.Update(4 * time.Microsecond)
			if math.Abs(float64(d.Rate())/tc.at4us-1) > 1e-6 {
				t.Errorf("RC at 4 µs = %d, want %.0f", d.Rate(), tc.at4us)
			}
		})
	}
}

func TestDCQCNCut(t *testing.T) {
	slowAlpha := func(p *DCQCNParams) { p.AlphaPeriod = time.Hour } // α stays where it is
	for _, tc := range []struct {
		name string
		tune func(*DCQCNParams)
		want float64 // RC after one cut, as a share of RC before
	}{
		// α = 1023/1024: RC·α/2 is cut, RC keeps 1 − 1023/2048.
		{"alpha 1023", slowAlpha, 1 - 1023.0/2048},
		// rpg_min_dec_fac: a cut keeps at least that share.
		{"min_dec_fac 80", func(p *DCQCNParams) { slowAlpha(p); p.MinDecFac = 80 }, 0.8},
		// rpg_gd 12: a quarter of α·RC.
		{"gd 12", func(p *DCQCNParams) { slowAlpha(p); p.Gd = 12 }, 1 - 1023.0/4096},
		// Default α period: the CNP at 1 µs raised nothing yet (it
		// counts at the next α update); α decayed at 1 µs, decayed and
		// took the CNP's 5/1024 at 2 µs, decayed at 3 and 4 µs.
		{"default alpha", nil, 1 - ((1023*decay*decay+5)*decay*decay)/2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultDCQCN()
			if tc.tune != nil {
				tc.tune(&p)
			}
			d := limitedDCQCN(&p)
			d.OnCNP(time.Microsecond)
			d.Update(4*time.Microsecond - 1)
			if d.Rate() != 100*gbps || d.Cuts() != 0 {
				t.Fatalf("before the monitor tick: RC %d, %d cuts", d.Rate(), d.Cuts())
			}
			d.Update(4 * time.Microsecond)
			got := float64(d.Rate()) / (100 * gbps)
			if d.Cuts() != 1 || math.Abs(got-tc.want) > 1e-6 {
				t.Errorf("after one cut: RC = %.6f·RC (%d cuts), want %.6f·RC", got, d.Cuts(), tc.want)
			}
			if d.Target() != 100*gbps {
				t.Errorf("RT = %d after the first cut, want the line rate (no increase since the limiter came)", d.Target())
			}
		})
	}
}

// TestDCQCNOneCutPerPeriod: many CNPs in one monitor period cut once.
func TestDCQCNOneCutPerPeriod(t *testing.T) {
	p := DefaultDCQCN()
	d := limitedDCQCN(&p)
	for at := time.Microsecond; at < 4*time.Microsecond; at += 100 * time.Nanosecond {
		d.OnCNP(at)
	}
	d.Update(7 * time.Microsecond)
	if d.Cuts() != 1 {
		t.Fatalf("%d cuts for CNPs within one period, want 1", d.Cuts())
	}
	d.OnCNP(7 * time.Microsecond)
	d.Update(8 * time.Microsecond)
	if d.Cuts() != 2 {
		t.Fatalf("%d cuts after a CNP in the next period, want 2", d.Cuts())
	}
}

// TestDCQCNIncrease checks the stages after a cut: fast recovery halves
// RT − RC, additive and hyper increase add their steps to RT.
func TestDCQCNIncrease(t *testing.T) {
	type step struct {
		bytes  int   // sent before the event (byte-counter events)
		rt, rc int64 // after the event
	}
	const rt0, rc0 = 100 * gbps, 50_048_828_125 // one cut with α = 1023
	for _, tc := range []struct {
		name  string
		tune  func(*DCQCNParams)
		steps []step // one timer event each (every TimeReset)
	}{
		{"F=1 timer only", nil, []step{
			{0, rt0, (rc0 + rt0) / 2},                         // T=0: fast recovery
			{0, rt0, ((rc0+rt0)/2 + rt0) / 2},                 // T=1 ≥ F, but RT is capped at the line rate
			{0, rt0, (((rc0+rt0)/2+rt0)/2 + rt0) / 2},         // T=2: BC=0, still additive, capped
			{0, rt0, ((((rc0+rt0)/2+rt0)/2+rt0)/2 + rt0) / 2}, // and on
		}},
		{"F=5 fast recovery", func(p *DCQCNParams) { p.Threshold = 5; p.ByteReset = 0 }, []step{
			{0, rt0, rc0 + (rt0-rc0)/2},
			{0, rt0, rc0 + (rt0-rc0)/2 + (rt0-rc0)/4},
			{0, rt0, rc0 + (rt0-rc0)/2 + (rt0-rc0)/4 + (rt0-rc0)/8},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultDCQCN()
			p.AlphaPeriod = time.Hour
			if tc.tune != nil {
				tc.tune(&p)
			}
			d := limitedDCQCN(&p)
			d.OnCNP(time.Microsecond)
			d.Update(4 * time.Microsecond)
			if d.Rate() != rc0 {
				t.Fatalf("after the cut: RC %d, want %d", d.Rate(), rc0)
			}
			at := 4 * time.Microsecond
			for i, s := range tc.steps {
				at += p.TimeReset
				d.Update(at)
				// Integer halving: allow one b/s per step.
				if d.Target() != s.rt || abs64(d.Rate()-s.rc) > int64(i+1) {
					t.Errorf("event %d: RT %d RC %d, want RT %d RC %d", i, d.Target(), d.Rate(), s.rt, s.rc)
				}
			}
		})
	}
}

// TestDCQCNAdditiveHyper starts from a low rate with RT far below the
// line rate, so that the steps show: with F = 1, the first timer event is
// fast recovery, then RT grows by AI while either stage reaches F, and by
// HAI once both the timer and the byte counter passed it.
func TestDCQCNAdditiveHyper(t *testing.T) {
	p := DefaultDCQCN()
	p.AlphaPeriod = time.Hour
	p.ByteReset = 1000
	p.FirstCNPRate = 1 * gbps
	d := limitedDCQCN(&p)
	d.OnCNP(time.Microsecond)
	d.Update(4 * time.Microsecond) // cut: RT = 1 Gb/s (first rate), RC ≈ 0.5 Gb/s
	rt := d.Target()
	if rt != 1*gbps {
		t.Fatalf("RT after the cut = %d, want 1 Gb/s", rt)
	}
	at := 4*time.Microsecond + p.TimeReset
	check := func(what string, wantRT int64) {
		t.Helper()
		if d.Target() != wantRT {
			t.Errorf("%s: RT = %d, want %d (%+d)", what, d.Target(), wantRT, wantRT-rt)
		}
		rt = d.Target()
	}
	d.Update(at) // T=0, BC=0: fast recovery
	check("timer event 1 (T=0)", rt)
	at += p.TimeReset
	d.Update(at) // T=1: additive
	check("timer event 2 (T=1)", rt+p.AIRate)
	d.OnSent(1000, at) // BC=0 (T=2): max ≥ F, additive
	check("byte event 1 (BC=0, T=2)", rt+p.AIRate)
	d.OnSent(1000, at) // BC=1: additive
	check("byte event 2 (BC=1, T=2)", rt+p.AIRate)
	d.OnSent(1000, at) // BC=2, T=2: min(T, BC) = 2 > F: hyper
	check("byte event 3 (BC=2, T=2)", rt+p.HAIRate)
	at += p.TimeReset
	d.Update(at) // T=2, BC=3: hyper
	check("timer event 3 (T=2, BC=3)", rt+p.HAIRate)
	// A cut resets the stages: back to fast recovery.
	d.OnCNP(at)
	d.Update(at + p.MonitorPeriod)
	if d.Cuts() != 2 {
		t.Fatalf("%d cuts, want 2", d.Cuts())
	}
	rt = d.Target() // clamped to RC: the byte counter raised the rate
	d.Update(at + p.MonitorPeriod + p.TimeReset)
	check("timer event after the cut", rt)
}

// TestDCQCNAlphaDecay follows α without CNPs: α ← α·1019/1024 every µs,
// halving in about 142 µs (CC.md §4.2), and rising again with CNPs.
func TestDCQCNAlphaDecay(t *testing.T) {
	p := DefaultDCQCN()
	// No cuts and no increases (which would release a limiter that is
	// at the line rate): α only.
	p.MonitorPeriod, p.TimeReset = time.Hour, time.Hour
	for _, k := range []int{1, 10, 50, 142, 300, 1000} {
		d := limitedDCQCN(&p)
		d.OnCNP(time.Duration(k)*time.Microsecond + 1) // brings α up to date
		want := 1023 * math.Pow(decay, float64(k))
		got := float64(d.Alpha()) // in whole 1/1024: floored
		if got > want || got < want-1 {
			t.Errorf("α after %d µs = %v, want %.2f", k, got, want)
		}
		if k == 142 && (got < 500 || got > 512) {
			t.Errorf("α after 142 µs = %v, want about half of 1023", got)
		}
	}
	// CNPs in every period push α up: α ← α·1019/1024 + 5, whose fixed
	// point is 1024, capped at 1023. (In whole 1/1024 units, flooring,
	// it would stop near 820.)
	d := limitedDCQCN(&p)
	d.OnCNP(500 * time.Microsecond)
	low := d.Alpha()
	for i := range 2000 {
		d.OnCNP(500*time.Microsecond + time.Duration(i)*time.Microsecond)
	}
	// A CNP every 12 µs holds α at about 5/(1 − (1019/1024)¹²) ≈ 86 (in
	// 1/1024), where flooring whole units would have taken it to 0.
	sparse := limitedDCQCN(&p)
	for i := range 200 {
		sparse.OnCNP(time.Duration(i*12) * time.Microsecond)
	}
	if a := sparse.Alpha(); a < 75 || a > 95 {
		t.Errorf("α %d with a CNP every 12 µs, want about 86", a)
	}
	if low > 100 || d.Alpha() < 1015 {
		t.Errorf("α %d after 500 µs without CNPs, %d after 2000 µs of CNPs; want low, then near 1023", low, d.Alpha())
	}
}

// TestDCQCNMinRate: cuts never take RC below rpg_min_rate.
func TestDCQCNMinRate(t *testing.T) {
	p := DefaultDCQCN()
	p.MinRate = 40 * Mb
	d := limitedDCQCN(&p)
	at := time.Duration(0)
	for range 200 {
		at += p.MonitorPeriod
		d.OnCNP(at)
		d.Update(at + p.MonitorPeriod)
	}
	if d.Rate() != 40*Mb {
		t.Errorf("RC after 200 cuts = %d, want the floor %d", d.Rate(), 40*Mb)
	}
}

// TestDCQCNRelease: without CNPs the rate recovers to the line rate and
// the limiter is released; a QP idle longer than maxCatchUp increase
// events is released at once.
func TestDCQCNRelease(t *testing.T) {
	p := DefaultDCQCN()
	d := limitedDCQCN(&p)
	d.OnCNP(time.Microsecond)
	d.Update(4 * time.Microsecond)
	at := 4 * time.Microsecond
	for i := 0; d.Limited(); i++ {
		if i > 100 {
			t.Fatalf("still limited after 100 timer events: RC %d RT %d", d.Rate(), d.Target())
		}
		at += p.TimeReset
		d.Update(at)
	}
	if d.Rate() != 0 {
		t.Errorf("released: Rate() = %d, want 0 (unlimited)", d.Rate())
	}
	// Far from the line rate: RT rises by AI only (no bytes sent), which
	// needs more events than maxCatchUp allows after a long idle time.
	p2 := DefaultDCQCN()
	p2.FirstCNPRate = 1 * Mb
	p2.AIRate = 1
	d = limitedDCQCN(&p2)
	d.Update(time.Hour)
	if d.Limited() {
		t.Errorf("limited after an idle hour: RC %d RT %d", d.Rate(), d.Target())
	}
}

func TestDCQCNValidate(t *testing.T) {
	p := DefaultDCQCN()
	if err := p.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, bad := range []func(*DCQCNParams){
		func(p *DCQCNParams) { p.TimeReset = 0 },
		func(p *DCQCNParams) { p.MinDecFac = 101 },
		func(p *DCQCNParams) { p.G = 2000 },
		func(p *DCQCNParams) { p.InitialAlpha = 1024 },
		func(p *DCQCNParams) { p.AIRate = -1 },
		func(p *DCQCNParams) { p.Gd = 40 },
	} {
		p := DefaultDCQCN()
		bad(&p)
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", p)
		}
	}
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
