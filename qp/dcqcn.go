package qp

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// DCQCN is the reaction point of RoCE v2 congestion control (Zhu et al.,
// "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015), as
// ConnectX NICs run it per QP: a CNP makes the sender cut its rate, and
// timer and byte-counter events raise it again.
//
// The model is the ConnectX (mlx5) one, with its parameter names
// (mlxconfig ROCE_CC_*, sysfs ecn/roce_rp/*) and defaults:
//
//   - A QP is unlimited until its first CNP. That CNP allocates the rate
//     limiter: α = InitialAlpha, RC = RT = FirstCNPRate (the line rate by
//     default). By default it does not cut the rate; the next CNP does
//     (the isekai model). CutOnFirstCNP cuts at the first monitor tick
//     after it instead (the hpcc "Mlx" model).
//   - α (in 1/1024) is updated every AlphaPeriod: α ← α·G/1024 + (1024 − G)
//     if a CNP arrived in the period, else α ← α·G/1024; at most 1023.
//   - Every MonitorPeriod, if a CNP arrived in it: RT ← RC (when
//     ClampTargetRate, or when a byte-counter stage, or with
//     ClampAfterTimeInc a timer stage, raised the rate since the last
//     cut); RC ← max(MinRate, RC − min(RC·α >> Gd, RC·(100 − MinDecFac)/100));
//     the stages and the byte count restart, and so does the increase
//     timer.
//   - Every TimeReset (timer stage T) and every ByteReset bytes sent (byte
//     stage BC), before the stage is counted: if min(T, BC) > Threshold,
//     RT += HAIRate (hyper increase); else if max(T, BC) ≥ Threshold,
//     RT += AIRate (additive increase); else fast recovery. Then
//     RT ← min(RT, MaxRate) and RC ← (RC + RT)/2.
//
// Where the public models are silent, xroce chooses: the limiter is
// released (the QP is unlimited again, its timers stop) once RT has
// reached MaxRate and RC is within 1/1024 of it; and since a QP's state
// is brought up to date only when it sends or gets a CNP, a QP that idled
// long enough for more than maxCatchUp increase events is released at
// once rather than replaying them.
//
// A DCQCN is pure: its methods take the time, it keeps no timers. The
// engine asks it for the rate before each packet and tells it the bytes
// sent; the pacer (pace.go) spaces packets at that rate, and a QP that
// waits for its pacer also wakes at Next, when the rate may change.
type DCQCN struct {
	p       *DCQCNParams
	max     int64 // the RT cap: p.MaxRate or the line rate
	first   int64 // RC and RT on the first CNP
	limited bool
	rc, rt  int64 // current and target rate, bits/s
	alpha   int64 // in 1/1024 << alphaFrac
	cnpA    bool  // a CNP arrived since the last α update
	cnpD    bool  // a CNP arrived since the last monitor tick
	epoch   time.Duration
	alphaAt time.Duration // time of the last α update
	decAt   time.Duration // next monitor tick at or after the latest CNP, when cnpD
	incAt   time.Duration // next timer increase event
	t, bc   int           // timer and byte-counter stages since the last cut
	bytes   int64         // bytes sent since the last byte-counter event
	cuts    uint64
}

// DCQCNParams are the reaction point's parameters; DefaultDCQCN gives
// ConnectX's defaults (mlxconfig as a ConnectX-5 reports them). Rates are
// in bits/s of Ethernet frames on the wire.
type DCQCNParams struct {
	// ClampTargetRate (clamp_tgt_rate, default off) sets RT ← RC on every
	// cut.
	ClampTargetRate bool
	// ClampAfterTimeInc (clamp_tgt_rate_after_time_inc, default on) sets
	// RT ← RC on a cut also when only the timer raised the rate since the
	// last one.
	ClampAfterTimeInc bool
	// TimeReset (rpg_time_reset, 300 µs) is the period of the timer
	// increase events.
	TimeReset time.Duration
	// ByteReset is the bytes sent between byte-counter increase events; 0
	// turns them off. ConnectX's rpg_byte_reset is 32767; mlxconfig calls
	// its unit bytes, isekai's model 64-byte units, which the default
	// follows: 32767 × 64 = 2,097,088 bytes.
	ByteReset int64
	// Threshold (rpg_threshold, F, 1) is the stage count before additive
	// and hyper increase.
	Threshold int
	// MaxRate (rpg_max_rate) caps RT; 0 means the engine's line rate.
	MaxRate int64
	// AIRate and HAIRate (rpg_ai_rate 5 Mb/s, rpg_hai_rate 50 Mb/s) are
	// the additive and hyper increase steps of RT.
	AIRate, HAIRate int64
	// Gd (rpg_gd, 11) scales the cut: RC·α >> Gd with α in 1/1024, that is
	// RC·α/2.
	Gd uint
	// MinDecFac (rpg_min_dec_fac, 50) is the least share, in percent, of
	// the old rate that a cut keeps.
	MinDecFac int
	// MinRate (rpg_min_rate, 1 Mb/s) is the floor of RC.
	MinRate int64
	// FirstCNPRate (rate_to_set_on_first_cnp) is RC and RT when the first
	// CNP allocates the limiter; 0 means the line rate.
	FirstCNPRate int64
	// CutOnFirstCNP cuts the rate at the first monitor tick after the
	// first CNP (hpcc's model); by default the first CNP only allocates
	// the limiter (isekai's).
	CutOnFirstCNP bool
	// G (dce_tcp_g, 1019) is the weight, in 1/1024, of the old α.
	G int64
	// AlphaPeriod (dce_tcp_rtt, 1 µs) is the period of the α updates.
	AlphaPeriod time.Duration
	// InitialAlpha (initial_alpha_value, 1023) is α, in 1/1024, when the
	// limiter is allocated.
	InitialAlpha int64
	// MonitorPeriod (rate_reduce_monitor_period, 4 µs): at most one cut
	// per period, and only if a CNP arrived in it.
	MonitorPeriod time.Duration
}

// Mb is a megabit per second, the unit of ConnectX's rate parameters.
const Mb = 1_000_000

// DefaultDCQCN returns ConnectX's DCQCN parameters (the defaults of
// mlxconfig's ROCE_CC_* on a ConnectX-5).
func DefaultDCQCN() DCQCNParams {
	return DCQCNParams{
		ClampAfterTimeInc: true,
		TimeReset:         300 * time.Microsecond,
		ByteReset:         32767 * 64,
		Threshold:         1,
		AIRate:            5 * Mb,
		HAIRate:           50 * Mb,
		Gd:                11,
		MinDecFac:         50,
		MinRate:           1 * Mb,
		G:                 1019,
		AlphaPeriod:       time.Microsecond,
		InitialAlpha:      1023,
		MonitorPeriod:     4 * time.Microsecond,
	}
}

// ErrDCQCN is wrapped by the errors of DCQCNParams.Validate.
var ErrDCQCN = errors.New("invalid DCQCN parameters")

// Validate checks that the parameters make sense.
func (p *DCQCNParams) Validate() error {
	switch {
	case p.TimeReset <= 0 || p.AlphaPeriod <= 0 || p.MonitorPeriod <= 0:
		return fmt.Errorf("dcqcn: periods %v, %v, %v must be positive: %w", p.TimeReset, p.AlphaPeriod, p.MonitorPeriod, ErrDCQCN)
	case p.ByteReset < 0 || p.Threshold < 0 || p.MaxRate < 0 || p.AIRate < 0 || p.HAIRate < 0 || p.MinRate < 0 || p.FirstCNPRate < 0:
		return fmt.Errorf("dcqcn: negative value in %+v: %w", *p, ErrDCQCN)
	case p.Gd > 20:
		return fmt.Errorf("dcqcn: Gd %d above 20: %w", p.Gd, ErrDCQCN)
	case p.MinDecFac < 0 || p.MinDecFac > 100:
		return fmt.Errorf("dcqcn: MinDecFac %d%% not in 0..100: %w", p.MinDecFac, ErrDCQCN)
	case p.G < 0 || p.G > 1024 || p.InitialAlpha < 0 || p.InitialAlpha > 1023:
		return fmt.Errorf("dcqcn: G %d or InitialAlpha %d out of range: %w", p.G, p.InitialAlpha, ErrDCQCN)
	}
	return nil
}

// alphaFrac is the bits of α kept below ConnectX's unit of 1/1024. With
// α in whole 1/1024 units (isekai's model), flooring α·G/1024 takes at
// least one unit off at every update, so that CNPs less often than every
// 1024−G updates (5 µs by default) cannot hold α up at all and cuts fade
// to nothing; ConnectX's internal precision is not public. The extra bits
// make the updates those of the real-valued α of the DCQCN paper.
const alphaFrac = 20

// maxCatchUp bounds the increase events one update replays; beyond it the
// limiter is released (see DCQCN).
const maxCatchUp = 1 << 16

// NewDCQCN returns the reaction point of one QP, unlimited, with
// parameters p (not copied: they must not change) on a port of the given
// line rate in bits/s.
func NewDCQCN(p *DCQCNParams, lineRate int64) DCQCN {
	d := DCQCN{p: p, max: lineRate, first: lineRate}
	if p.MaxRate > 0 {
		d.max = p.MaxRate
	}
	if p.FirstCNPRate > 0 {
		d.first = min(p.FirstCNPRate, d.max)
	}
	return d
}

// Limited reports whether the rate limiter is allocated.
func (d *DCQCN) Limited() bool { return d.limited }

// Rate returns the current rate RC in bits/s, or 0 when unlimited, as of
// the latest update.
func (d *DCQCN) Rate() int64 {
	if !d.limited {
		return 0
	}
	return d.rc
}

// Target returns the target rate RT in bits/s (0 when unlimited).
func (d *DCQCN) Target() int64 {
	if !d.limited {
		return 0
	}
	return d.rt
}

// Next returns the time of the next event that changes the rate (a cut
// or a timer increase), Never when unlimited. A QP that waits for its
// pacer wakes then, so that a rate raised meanwhile shortens the wait.
func (d *DCQCN) Next() time.Duration {
	if !d.limited {
		return Never
	}
	if d.cnpD {
		return min(d.decAt, d.incAt)
	}
	return d.incAt
}

// Alpha returns α in 1/1024, as of the latest update.
func (d *DCQCN) Alpha() int64 { return d.alpha >> alphaFrac }

// Cuts returns the number of rate cuts so far.
func (d *DCQCN) Cuts() uint64 { return d.cuts }

// OnCNP takes a CNP received at now.
func (d *DCQCN) OnCNP(now time.Duration) {
	d.Update(now)
	if !d.limited {
		p := d.p
		d.limited = true
		d.alpha = p.InitialAlpha << alphaFrac
		d.rc, d.rt = d.first, d.first
		d.epoch, d.alphaAt, d.incAt = now, now, now+p.TimeReset
		d.t, d.bc, d.bytes = 0, 0, 0
		d.cnpA = false
		d.cnpD = p.CutOnFirstCNP
		d.decAt = now + p.MonitorPeriod
		return
	}
	d.updateAlpha(now) // the periods before this CNP saw none
	d.cnpA = true
	if !d.cnpD {
		d.cnpD = true
		// The next monitor tick after now.
		per := d.p.MonitorPeriod
		d.decAt = d.epoch + ((now-d.epoch)/per+1)*per
	}
}

// OnSent counts n bytes sent at now: every ByteReset bytes is a
// byte-counter increase event.
func (d *DCQCN) OnSent(n int, now time.Duration) {
	if !d.limited || d.p.ByteReset == 0 {
		return
	}
	d.Update(now)
	if !d.limited {
		return
	}
	d.bytes += int64(n)
	for d.bytes >= d.p.ByteReset && d.limited {
		d.bytes -= d.p.ByteReset
		d.increase()
		d.bc++
	}
}

// Update runs the events due by now, in time order: cuts at monitor ticks
// and timer increases. α is brought up to date when a cut needs it.
func (d *DCQCN) Update(now time.Duration) {
	for n := 0; d.limited; n++ {
		if n == maxCatchUp {
			d.release()
			return
		}
		if d.cnpD && d.decAt <= d.incAt {
			if d.decAt > now {
				return
			}
			d.cut(d.decAt)
			continue
		}
		if d.incAt > now {
			return
		}
		at := d.incAt
		d.increase()
		d.t++
		d.incAt = at + d.p.TimeReset
	}
}

// updateAlpha applies the α updates of the periods that ended by now.
func (d *DCQCN) updateAlpha(now time.Duration) {
	p := d.p
	n := (now - d.alphaAt) / p.AlphaPeriod
	d.alphaAt += n * p.AlphaPeriod
	for ; n > 0; n-- {
		if d.cnpA {
			d.alpha = min(d.alpha*p.G/1024+(1024-p.G)<<alphaFrac, 1023<<alphaFrac)
			d.cnpA = false
			continue
		}
		a := d.alpha * p.G / 1024
		if a == d.alpha {
			break // 0, or G = 1024: no more change
		}
		d.alpha = a
	}
}

// cut is the monitor tick at 'at' after a CNP: the rate decrease.
func (d *DCQCN) cut(at time.Duration) {
	p := d.p
	d.updateAlpha(at)
	if p.ClampTargetRate || d.bc > 0 || p.ClampAfterTimeInc && d.t > 0 {
		d.rt = d.rc
	}
	hi, lo := bits.Mul64(uint64(d.rc), uint64(d.alpha))
	sh := p.Gd + alphaFrac
	dec := min(int64(hi<<(64-sh)|lo>>sh), d.rc*int64(100-p.MinDecFac)/100)
	d.rc = max(d.rc-dec, p.MinRate)
	d.t, d.bc, d.bytes = 0, 0, 0
	d.incAt = at + p.TimeReset
	d.cnpD = false
	d.cuts++
}

// increase is a timer or byte-counter event, before its stage is counted.
func (d *DCQCN) increase() {
	p := d.p
	switch {
	case min(d.t, d.bc) > p.Threshold:
		d.rt += p.HAIRate
	case max(d.t, d.bc) >= p.Threshold:
		d.rt += p.AIRate
	}
	d.rt = min(d.rt, d.max)
	d.rc = (d.rc + d.rt) / 2
	if d.rt >= d.max && d.max-d.rc <= d.max>>10 && !d.cnpD {
		d.release()
	}
}

// release frees the limiter: the QP is unlimited until its next CNP.
func (d *DCQCN) release() {
	d.limited = false
	d.cnpA, d.cnpD = false, false
	d.rc, d.rt = d.max, d.max
}
