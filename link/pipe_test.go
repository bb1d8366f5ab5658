package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClock is a manually advanced clock; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

var fakeEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) Now() time.Time            { return fakeEpoch.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration)   { c.ns.Add(int64(d)) }
func (c *fakeClock) Set(t time.Time)           { c.ns.Store(int64(t.Sub(fakeEpoch))) }
func (c *fakeClock) Since(t time.Time) float64 { return float64(c.Now().Sub(t)) }

// frame fills buf with a frame of n >= 16 bytes numbered seq: the number
// twice (so a flipped bit in one copy leaves the other), then a pattern.
func frame(buf []byte, seq uint64, n int) []byte {
	buf = buf[:n]
	for i := range buf {
		buf[i] = byte(seq) + byte(i)
	}
	binary.BigEndian.PutUint64(buf, seq)
	binary.BigEndian.PutUint64(buf[8:], seq)
	return buf
}

// flips returns how many bits of g differ from the frame it was sent as.
func flips(g []byte) int {
	best := len(g) * 8
	for _, seq := range []uint64{seqOf(g), binary.BigEndian.Uint64(g[8:])} {
		want := frame(make([]byte, len(g)), seq, len(g))
		n := 0
		for i := range g {
			n += bits.OnesCount8(g[i] ^ want[i])
		}
		best = min(best, n)
	}
	return best
}

// send transmits one frame numbered seq of n bytes from e.
func send(t testing.TB, e *PipeEnd, seq uint64, n int) {
	t.Helper()
	var bufs [1][]byte
	if e.Alloc(bufs[:]) != 1 {
		t.Fatalf("%s: Alloc: no buffer", e.Info().Name)
	}
	bufs[0] = frame(bufs[0], seq, n)
	if got, err := e.Transmit(bufs[:]); got != 1 || err != nil {
		t.Fatalf("%s: Transmit = %d, %v; want 1, nil", e.Info().Name, got, err)
	}
}

// drain receives (without waiting) everything deliverable at e, copies it
// out and releases the buffers.
func drain(t testing.TB, e *PipeEnd) [][]byte {
	t.Helper()
	var out [][]byte
	bufs := make([][]byte, 64)
	for {
		n, err := e.Receive(bufs, 0)
		if err != nil {
			t.Fatalf("%s: Receive: %v", e.Info().Name, err)
		}
		if n == 0 {
			return out
		}
		for _, b := range bufs[:n] {
			out = append(out, bytes.Clone(b))
		}
		e.Release(bufs[:n])
	}
}

func seqOf(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

func TestPipeInfo(t *testing.T) {
	a, b := NewPipe(PipeConfig{})
	for _, tc := range []struct {
		e    *PipeEnd
		name string
		mac  string
	}{{a, "pipe-a", "02:00:00:00:00:0a"}, {b, "pipe-b", "02:00:00:00:00:0b"}} {
		info := tc.e.Info()
		if info.Kind != "pipe" || info.Name != tc.name || info.MAC.String() != tc.mac ||
			info.MTU != 1500 || info.MaxFrame != 1518 || info.Index != 0 {
			t.Errorf("Info() = %+v, want pipe %s %s MTU 1500 MaxFrame 1518", info, tc.name, tc.mac)
		}
		info.MAC[0] = 0xff // a copy: must not change the end
		if tc.e.Info().MAC.String() != tc.mac {
			t.Errorf("Info().MAC aliases the end's address")
		}
	}
	a, _ = NewPipe(PipeConfig{Name: "x", MTU: 9000})
	if info := a.Info(); info.Name != "x-a" || info.MaxFrame != 9018 {
		t.Errorf("Info() = %+v, want x-a MaxFrame 9018", info)
	}
}

func TestPipeBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  PipeConfig
	}{
		{"negative buffers", PipeConfig{Buffers: -1}},
		{"negative MTU", PipeConfig{MTU: -5, MaxFrame: 10}},
		{"loss > 1", PipeConfig{AtoB: Faults{Loss: 1.5}}},
		{"NaN corrupt", PipeConfig{BtoA: Faults{Corrupt: math.NaN()}}},
		{"negative delay", PipeConfig{AtoB: Faults{Delay: -1}}},
		{"negative rate", PipeConfig{BtoA: Faults{Rate: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("NewPipe(%+v) did not panic", tc.cfg)
				}
			}()
			NewPipe(tc.cfg)
		})
	}
	a, _ := NewPipe(PipeConfig{})
	if err := a.SetFaults(Faults{Duplicate: -0.1}); err == nil {
		t.Errorf("SetFaults(Duplicate -0.1) succeeded")
	}
}

func TestPipeOwnership(t *testing.T) {
	a, b := NewPipe(PipeConfig{Buffers: 8, MTU: 100})
	bufs := make([][]byte, 10)
	if n := a.Alloc(bufs); n != 8 {
		t.Fatalf("Alloc(10) with 8 buffers = %d, want 8", n)
	}
	for i, buf := range bufs[:8] {
		if len(buf) != 118 || cap(buf) != 118 {
			t.Errorf("buffer %d: len %d cap %d, want 118 118", i, len(buf), cap(buf))
		}
	}
	if n := a.Alloc(bufs[:1]); n != 0 {
		t.Errorf("Alloc on exhausted end = %d, want 0", n)
	}
	if s := a.Stats(); s.TxNoBuffers != 2 {
		t.Errorf("TxNoBuffers = %d, want 2", s.TxNoBuffers)
	}
	// Transmit gives the sender's buffers back at once.
	for i := range 3 {
		bufs[i] = frame(bufs[i], uint64(i), 60+i)
	}
	if n, err := a.Transmit(bufs[:3]); n != 3 || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	a.Release(bufs[3:8])
	if n := a.Alloc(bufs); n != 8 {
		t.Errorf("Alloc after Transmit and Release = %d, want 8", n)
	}
	a.Release(bufs[:8])

	// The frames sit in b's buffers: 5 of b's 8 remain for b's Alloc.
	if n := b.Alloc(bufs); n != 5 {
		t.Errorf("b.Alloc with 3 frames pending = %d, want 5", n)
	}
	// b has no free buffer now: frames sent to it are dropped, as by a NIC.
	send(t, a, 99, 60)
	if s := b.Stats(); s.RxDropped != 1 {
		t.Errorf("b RxDropped = %d, want 1", s.RxDropped)
	}
	b.Release(bufs[:5])
	rx := make([][]byte, 4)
	n, err := b.Receive(rx, 0)
	if n != 3 || err != nil {
		t.Fatalf("Receive = %d, %v; want 3", n, err)
	}
	for i, buf := range rx[:n] {
		want := frame(make([]byte, 100), uint64(i), 60+i)
		if !bytes.Equal(buf, want) {
			t.Errorf("frame %d = %x, want %x", i, buf, want)
		}
		if cap(buf) != 118 {
			t.Errorf("received buffer cap %d, want 118", cap(buf))
		}
	}
	if got := b.Alloc(bufs); got != 5 {
		t.Errorf("b.Alloc while holding 3 received = %d, want 5", got)
	}
	b.Release(bufs[:5])
	b.Release(rx[:n])
	if got := b.Alloc(bufs); got != 8 {
		t.Errorf("b.Alloc after releasing all = %d, want 8", got)
	}
	b.Release(bufs[:8])
	s := b.Stats()
	if s.RxFrames != 3 || s.RxBytes != 60+61+62 {
		t.Errorf("b Rx %d frames %d bytes, want 3, 183", s.RxFrames, s.RxBytes)
	}
	if s := a.Stats(); s.TxFrames != 4 || s.TxBytes != 60+61+62+60 {
		t.Errorf("a Tx %d frames %d bytes, want 4, 243", s.TxFrames, s.TxBytes)
	}
}

// TestPipeMisuse checks that breaking the ownership rules panics and leaves
// the pipe usable.
func TestPipeMisuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(a, b *PipeEnd, own []byte)
	}{
		{"release other end's buffer", func(a, b *PipeEnd, own []byte) {
			var x [1][]byte
			b.Alloc(x[:])
			a.Release(x[:])
		}},
		{"release foreign memory", func(a, b *PipeEnd, own []byte) { a.Release([][]byte{make([]byte, 10)}) }},
		{"release nil", func(a, b *PipeEnd, own []byte) { a.Release([][]byte{nil}) }},
		{"double release", func(a, b *PipeEnd, own []byte) {
			a.Release([][]byte{own})
			a.Release([][]byte{own})
		}},
		{"same buffer twice in a batch", func(a, b *PipeEnd, own []byte) { a.Release([][]byte{own, own}) }},
		{"transmit twice in a batch", func(a, b *PipeEnd, own []byte) { a.Transmit([][]byte{own, own}) }},
		{"transmit after transmit", func(a, b *PipeEnd, own []byte) {
			a.Transmit([][]byte{own})
			a.Transmit([][]byte{own})
		}},
		{"resliced start", func(a, b *PipeEnd, own []byte) { a.Release([][]byte{own[14:]}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewPipe(PipeConfig{Buffers: 4})
			var x [1][]byte
			a.Alloc(x[:])
			func() {
				defer func() {
					v := recover()
					if v == nil || !strings.Contains(fmt.Sprint(v), "pipe") {
						t.Errorf("recovered %v, want a pipe panic", v)
					}
				}()
				tc.do(a, b, x[0])
			}()
			// The pipe is still usable and consistent.
			send(t, a, 1, 64)
			if got := drain(t, b); len(got) < 1 {
				t.Errorf("no frame after misuse")
			}
		})
	}
	// A batch that panics leaves its valid buffers owned by the caller.
	a, _ := NewPipe(PipeConfig{Buffers: 2})
	bufs := make([][]byte, 2)
	a.Alloc(bufs)
	func() {
		defer func() { recover() }()
		a.Release([][]byte{bufs[0], bufs[1], bufs[0]})
	}()
	a.Release(bufs) // must not panic: both still owned
	if n := a.Alloc(bufs); n != 2 {
		t.Errorf("Alloc after recovered misuse = %d, want 2", n)
	}
}

// runFaults sends n numbered frames from a to b on a fake clock, advancing
// it by step per frame and draining b, and returns what b received.
func runFaults(t testing.TB, cfg PipeConfig, n int, step time.Duration) (a, b *PipeEnd, got [][]byte, at []time.Duration) {
	clk := &fakeClock{}
	cfg.Clock = clk.Now
	if cfg.Buffers == 0 {
		cfg.Buffers = 256
	}
	a, b = NewPipe(cfg)
	start := clk.Now()
	collect := func() {
		for _, f := range drain(t, b) {
			got = append(got, f)
			at = append(at, clk.Now().Sub(start))
		}
	}
	for i := range n {
		send(t, a, uint64(i), 64+i%512)
		collect()
		clk.Advance(step)
	}
	for {
		next, ok := b.NextDelivery()
		if !ok {
			break
		}
		clk.Set(next)
		collect()
	}
	collect()
	return a, b, got, at
}

// within checks that count is within 5 standard deviations of n×p.
func within(t *testing.T, what string, count uint64, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(count)-mean) > 5*sd+1 {
		t.Errorf("%s = %d of %d, want %.0f ± %.0f (p = %v)", what, count, n, mean, 5*sd, p)
	}
}

func TestPipeFaultRates(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		name   string
		faults Faults
	}{
		{"perfect", Faults{}},
		{"loss", Faults{Loss: 0.1}},
		{"loss all", Faults{Loss: 1}},
		{"duplicate", Faults{Duplicate: 0.05}},
		{"corrupt", Faults{Corrupt: 0.2}},
		{"reorder", Faults{Reorder: 0.1}},
		{"reorder gap 3", Faults{Reorder: 0.02, ReorderGap: 3}},
		{"all", Faults{Loss: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.faults
			a, b, got, _ := runFaults(t, PipeConfig{Seed: 7, AtoB: f}, n, time.Microsecond)
			x := a.Stats().Extra
			within(t, "lost", x["lost"], n, f.Loss)
			within(t, "duplicated", x["duplicated"], n-int(x["lost"]), f.Duplicate)
			within(t, "corrupted", x["corrupted"], n-int(x["lost"]), f.Corrupt)
			within(t, "reordered", x["reordered"], n-int(x["lost"]), f.Reorder)
			if want := n - int(x["lost"]) + int(x["duplicated"]); len(got) != want {
				t.Errorf("received %d frames, want %d sent - %d lost + %d duplicated", len(got), n, x["lost"], x["duplicated"])
			}
			if s := b.Stats(); s.RxDropped != 0 || s.RxFrames != uint64(len(got)) {
				t.Errorf("b RxDropped %d RxFrames %d, want 0 %d", s.RxDropped, s.RxFrames, len(got))
			}
			// Corruption flips exactly one bit; count the damaged frames.
			// A corrupted sequence number is told apart by the payload,
			// which frame() derives from the true sequence number.
			corrupted := 0
			for _, g := range got {
				n := flips(g)
				if n > 1 {
					t.Fatalf("frame %d has %d bits flipped, want at most 1", seqOf(g), n)
				}
				corrupted += n
			}
			if f.Duplicate == 0 && uint64(corrupted) != x["corrupted"] {
				t.Errorf("%d frames arrived corrupted, counter says %d", corrupted, x["corrupted"])
			}
			// Reordering: each held frame arrives after frames sent later.
			if f.Corrupt == 0 && f.Duplicate == 0 {
				late, maxSeen := 0, int64(-1)
				for _, g := range got {
					s := int64(seqOf(g))
					if s < maxSeen {
						late++
					}
					maxSeen = max(maxSeen, s)
				}
				// The last few held frames may have no followers to
				// overtake them; they leave at their timeout, in order.
				if r := x["reordered"]; uint64(late) > r || r-uint64(late) > uint64(max(f.ReorderGap, 1)) {
					t.Errorf("%d frames arrived late, counter says %d reordered", late, r)
				}
			}
		})
	}
}

// TestPipeReorderGap checks that a reordered frame is overtaken by exactly
// ReorderGap frames.
func TestPipeReorderGap(t *testing.T) {
	for _, gap := range []int{1, 2, 5} {
		t.Run(fmt.Sprint(gap), func(t *testing.T) {
			f := Faults{Reorder: 1, ReorderGap: gap}
			a, b := NewPipe(PipeConfig{})
			// Only frame 3 is reordered: switch reordering on just for it.
			for i := range 10 {
				if i == 3 {
					a.SetFaults(f)
				} else {
					a.SetFaults(Faults{})
				}
				send(t, a, uint64(i), 64)
			}
			var seqs []uint64
			for _, g := range drain(t, b) {
				seqs = append(seqs, seqOf(g))
			}
			want := []uint64{0, 1, 2}
			for i := 4; i < 4+gap; i++ {
				want = append(want, uint64(i))
			}
			want = append(want, 3)
			for i := 4 + gap; i < 10; i++ {
				want = append(want, uint64(i))
			}
			if !slices.Equal(seqs, want) {
				t.Errorf("order %v, want %v", seqs, want)
			}
		})
	}
}

// TestPipeReorderTimeout checks that a held frame with no followers is
// delivered after ReorderTimeout.
func TestPipeReorderTimeout(t *testing.T) {
	clk := &fakeClock{}
	a, b := NewPipe(PipeConfig{Clock: clk.Now, AtoB: Faults{Reorder: 1, ReorderGap: 3, ReorderTimeout: 5 * time.Millisecond}})
	start := clk.Now()
	send(t, a, 1, 64)
	if got := drain(t, b); len(got) != 0 {
		t.Fatalf("held frame delivered at once")
	}
	next, ok := b.NextDelivery()
	if !ok || next.Sub(start) != 5*time.Millisecond {
		t.Fatalf("NextDelivery = %v, %v; want +5ms", next.Sub(start), ok)
	}
	if b.InFlight() != 1 {
		t.Errorf("InFlight = %d, want 1", b.InFlight())
	}
	clk.Advance(5*time.Millisecond - 1)
	if got := drain(t, b); len(got) != 0 {
		t.Fatalf("held frame delivered before its timeout")
	}
	clk.Advance(1)
	if got := drain(t, b); len(got) != 1 || seqOf(got[0]) != 1 {
		t.Fatalf("got %d frames at the timeout, want frame 1", len(got))
	}
	if _, ok := b.NextDelivery(); ok || b.InFlight() != 0 {
		t.Errorf("frames still in flight after delivery")
	}
}

func TestPipeDeterminism(t *testing.T) {
	faults := Faults{Loss: 0.05, Duplicate: 0.05, Corrupt: 0.05, Reorder: 0.05, Delay: time.Millisecond, Jitter: 300 * time.Microsecond, Rate: 10e9}
	type run struct {
		frames [][]byte
		at     []time.Duration
	}
	do := func(seed uint64) run {
		_, _, got, at := runFaults(t, PipeConfig{Seed: seed, AtoB: faults, Buffers: 1024}, 5000, time.Microsecond)
		return run{got, at}
	}
	r1, r2, r3 := do(1), do(1), do(2)
	same := func(x, y run) bool {
		return slices.EqualFunc(x.frames, y.frames, bytes.Equal) && slices.Equal(x.at, y.at)
	}
	if !same(r1, r2) {
		t.Errorf("two runs with seed 1 differ (%d and %d frames)", len(r1.frames), len(r2.frames))
	}
	if same(r1, r3) {
		t.Errorf("seeds 1 and 2 gave identical runs")
	}
	if len(r1.frames) < 4000 {
		t.Errorf("only %d frames delivered", len(r1.frames))
	}
}

func TestPipeDelay(t *testing.T) {
	clk := &fakeClock{}
	a, b := NewPipe(PipeConfig{Clock: clk.Now, AtoB: Faults{Delay: 10 * time.Millisecond}})
	start := clk.Now()
	if _, ok := b.NextDelivery(); ok {
		t.Fatalf("NextDelivery on an empty pipe reports a frame")
	}
	send(t, a, 1, 100)
	clk.Advance(time.Millisecond)
	send(t, a, 2, 100)
	if got := drain(t, b); len(got) != 0 {
		t.Fatalf("delayed frames delivered at once")
	}
	for _, want := range []struct {
		at  time.Duration
		seq uint64
	}{{10 * time.Millisecond, 1}, {11 * time.Millisecond, 2}} {
		next, ok := b.NextDelivery()
		if !ok || next.Sub(start) != want.at {
			t.Fatalf("NextDelivery = +%v, %v; want +%v", next.Sub(start), ok, want.at)
		}
		clk.Set(next)
		got := drain(t, b)
		if len(got) != 1 || seqOf(got[0]) != want.seq {
			t.Fatalf("at +%v got %d frames, want frame %d", want.at, len(got), want.seq)
		}
	}
	if x := a.Stats().Extra; x["delayed"] != 2 {
		t.Errorf("delayed = %d, want 2", x["delayed"])
	}
	// b→a has no delay.
	send(t, b, 3, 100)
	if got := drain(t, a); len(got) != 1 {
		t.Errorf("undelayed direction delivered %d frames, want 1", len(got))
	}
}

func TestPipeJitter(t *testing.T) {
	const n = 5000
	delay, jitter := 2*time.Millisecond, 500*time.Microsecond
	_, _, got, at := runFaults(t, PipeConfig{Seed: 3, Buffers: 4096, AtoB: Faults{Delay: delay, Jitter: jitter}}, n, time.Microsecond)
	if len(got) != n {
		t.Fatalf("received %d frames, want %d", len(got), n)
	}
	var sum time.Duration
	lo, hi := time.Hour, time.Duration(0)
	reordered := 0
	for i, g := range got {
		d := at[i] - time.Duration(seqOf(g))*time.Microsecond // frame k was sent at k µs
		if i > 0 && seqOf(g) < seqOf(got[i-1]) {
			reordered++
		}
		sum += d
		lo, hi = min(lo, d), max(hi, d)
	}
	mean := sum / n
	if lo < delay-jitter || hi > delay+jitter {
		t.Errorf("delays in [%v, %v], want within [%v, %v]", lo, hi, delay-jitter, delay+jitter)
	}
	if lo > delay-jitter*9/10 || hi < delay+jitter*9/10 {
		t.Errorf("delays in [%v, %v] do not spread over ±%v", lo, hi, jitter)
	}
	if d := mean - delay; d < -20*time.Microsecond || d > 20*time.Microsecond {
		t.Errorf("mean delay %v, want %v", mean, delay)
	}
	if reordered == 0 {
		t.Errorf("jitter of ±%v between frames 1µs apart reordered nothing", jitter)
	}
}

func TestPipeRate(t *testing.T) {
	clk := &fakeClock{}
	// 1 Gbit/s: a 1226-byte frame plus 24 bytes overhead takes 10 µs.
	a, b := NewPipe(PipeConfig{Clock: clk.Now, AtoB: Faults{Rate: 1e9, RateOverhead: 24, Delay: time.Millisecond}})
	start := clk.Now()
	for i := range 5 {
		send(t, a, uint64(i), 1226)
	}
	for i := range 5 {
		next, ok := b.NextDelivery()
		want := time.Millisecond + time.Duration(i+1)*10*time.Microsecond
		if !ok || next.Sub(start) != want {
			t.Fatalf("frame %d deliverable at +%v, want +%v", i, next.Sub(start), want)
		}
		clk.Set(next)
		if got := drain(t, b); len(got) != 1 || seqOf(got[0]) != uint64(i) {
			t.Fatalf("frame %d: got %d frames", i, len(got))
		}
	}
	// An idle wire starts the next frame at once.
	clk.Advance(time.Second)
	idle := clk.Now()
	send(t, a, 9, 1226)
	if next, _ := b.NextDelivery(); next.Sub(idle) != time.Millisecond+10*time.Microsecond {
		t.Errorf("after idle deliverable at +%v, want +1.01ms", next.Sub(idle))
	}
}

func TestPipeMaxQueueDelay(t *testing.T) {
	clk := &fakeClock{}
	// 100 µs per frame; at most 250 µs of queue: 1 on the wire + 2 waiting
	// (the one starting at 300 µs would wait too long).
	a, b := NewPipe(PipeConfig{Clock: clk.Now, AtoB: Faults{Rate: 1e8, MaxQueueDelay: 250 * time.Microsecond}})
	for i := range 10 {
		send(t, a, uint64(i), 1250)
	}
	if x := a.Stats().Extra; x["overflow"] != 7 {
		t.Errorf("overflow = %d, want 7", x["overflow"])
	}
	clk.Advance(time.Second)
	if got := drain(t, b); len(got) != 3 {
		t.Errorf("delivered %d, want 3", len(got))
	}
}

func TestPipeDropFilter(t *testing.T) {
	a, b := NewPipe(PipeConfig{AtoB: Faults{Drop: func(f []byte) bool { return seqOf(f)%3 == 0 }}})
	for i := range 9 {
		send(t, a, uint64(i), 64)
	}
	var seqs []uint64
	for _, g := range drain(t, b) {
		seqs = append(seqs, seqOf(g))
	}
	if want := []uint64{1, 2, 4, 5, 7, 8}; !slices.Equal(seqs, want) {
		t.Errorf("received %v, want %v", seqs, want)
	}
	if x := a.Stats().Extra; x["filtered"] != 3 {
		t.Errorf("filtered = %d, want 3", x["filtered"])
	}
}

func TestPipeStatsExtra(t *testing.T) {
	a, _ := NewPipe(PipeConfig{})
	x := a.Stats().Extra
	for _, k := range []string{"lost", "duplicated", "reordered", "corrupted", "delayed", "filtered", "overflow"} {
		if v, ok := x[k]; !ok || v != 0 {
			t.Errorf("Extra[%q] = %d, %v; want 0, true", k, v, ok)
		}
	}
}

// TestPipeReceiveBlocking runs in a synctest bubble: the waits are on
// fake time and so exact. A Receive that spun on the clock instead of
// sleeping would not let the bubble's clock advance and would hang here
// (until the test binary's timeout) rather than return.
func TestPipeReceiveBlocking(t *testing.T) {
	bufs := make([][]byte, 8)
	t.Run("timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, b := NewPipe(PipeConfig{})
			start := time.Now()
			n, err := b.Receive(bufs, 200*time.Millisecond)
			if el := time.Since(start); n != 0 || err != nil || el != 200*time.Millisecond {
				t.Errorf("Receive(200ms) on an idle pipe = %d, %v after %v, want 0, nil after 200ms", n, err, el)
			}
		})
	})
	t.Run("wakeup", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, b := NewPipe(PipeConfig{})
			done := make(chan error)
			go func() {
				n, err := b.Receive(bufs, -1)
				if n != 0 {
					err = fmt.Errorf("got %d frames", n)
				}
				done <- err
			}()
			synctest.Wait() // Receive asleep
			select {
			case <-done:
				t.Fatal("Receive(-1) on an idle pipe returned before Wakeup")
			default:
			}
			b.Wakeup()
			if err := <-done; err != nil {
				t.Error(err)
			}
			// A Wakeup before Receive makes it return without waiting, once.
			b.Wakeup()
			start := time.Now()
			if n, err := b.Receive(bufs, time.Minute); n != 0 || err != nil || time.Since(start) != 0 {
				t.Errorf("Receive after Wakeup = %d, %v after %v, want 0, nil at once", n, err, time.Since(start))
			}
			start = time.Now()
			if n, _ := b.Receive(bufs, 20*time.Millisecond); n != 0 || time.Since(start) != 20*time.Millisecond {
				t.Errorf("second Receive(20ms) after one Wakeup = %d after %v, want 0 after 20ms", n, time.Since(start))
			}
			if s := b.Stats(); s.Wakeups != 2 {
				t.Errorf("Wakeups = %d, want 2", s.Wakeups)
			}
		})
	})
	t.Run("frame", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := NewPipe(PipeConfig{})
			go func() {
				time.Sleep(20 * time.Millisecond)
				var x [1][]byte
				a.Alloc(x[:])
				a.Transmit([][]byte{frame(x[0], 42, 64)})
			}()
			start := time.Now()
			n, err := b.Receive(bufs, -1)
			if el := time.Since(start); n != 1 || err != nil || seqOf(bufs[0]) != 42 || el != 20*time.Millisecond {
				t.Fatalf("Receive = %d, %v after %v, want frame 42 when it was sent, after 20ms", n, err, el)
			}
			b.Release(bufs[:1])
		})
	})
	t.Run("delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := NewPipe(PipeConfig{AtoB: Faults{Delay: 50 * time.Millisecond}})
			start := time.Now()
			send(t, a, 7, 64)
			n, err := b.Receive(bufs, -1)
			if el := time.Since(start); n != 1 || err != nil || el != 50*time.Millisecond {
				t.Fatalf("Receive of a 50ms-delayed frame = %d, %v after %v, want 1, nil after 50ms", n, err, el)
			}
			b.Release(bufs[:1])
			// A timeout shorter than the delay returns empty.
			send(t, a, 8, 64)
			if n, _ := b.Receive(bufs, 10*time.Millisecond); n != 0 {
				t.Errorf("Receive(10ms) returned a 50ms-delayed frame")
			}
		})
	})
}

// WaitReceive waits like Receive (a frame, its delivery time, a Wakeup,
// the timeout) and takes nothing.
func TestPipeWaitReceive(t *testing.T) {
	a, b := NewPipe(PipeConfig{AtoB: Faults{Delay: 30 * time.Millisecond}})
	if ok, err := b.WaitReceive(0); ok || err != nil {
		t.Fatalf("WaitReceive(0) on an idle pipe = %v, %v", ok, err)
	}
	start := time.Now()
	if ok, err := b.WaitReceive(20 * time.Millisecond); ok || err != nil || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("WaitReceive(20ms) on an idle pipe = %v, %v after %v", ok, err, time.Since(start))
	}
	send(t, a, 9, 64)
	start = time.Now()
	if ok, err := b.WaitReceive(-1); !ok || err != nil || time.Since(start) < 25*time.Millisecond {
		t.Fatalf("WaitReceive of a 30ms-delayed frame = %v, %v after %v", ok, err, time.Since(start))
	}
	if ok, _ := b.WaitReceive(0); !ok {
		t.Fatal("WaitReceive took the frame")
	}
	bufs := make([][]byte, 4)
	if n, _ := b.Receive(bufs, 0); n != 1 || seqOf(bufs[0]) != 9 {
		t.Fatalf("Receive after WaitReceive = %d", n)
	}
	b.Release(bufs[:1])
	b.Wakeup()
	if ok, err := b.WaitReceive(time.Minute); ok || err != nil {
		t.Fatalf("WaitReceive after Wakeup = %v, %v", ok, err)
	}
	if s := b.Stats(); s.RxFrames != 1 {
		t.Errorf("RxFrames = %d, want 1", s.RxFrames)
	}
	b.Close()
	if _, err := b.WaitReceive(-1); err != ErrClosed {
		t.Errorf("WaitReceive after Close: %v", err)
	}
}

func TestPipeClose(t *testing.T) {
	a, b := NewPipe(PipeConfig{AtoB: Faults{Delay: time.Hour}})
	bufs := make([][]byte, 4)
	send(t, a, 1, 64)
	done := make(chan error)
	go func() {
		_, err := b.Receive(bufs, -1)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("waiting Receive after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting Receive")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := b.Alloc(bufs); n != 0 {
		t.Errorf("Alloc after Close = %d", n)
	}
	if _, err := b.Receive(bufs, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Receive after Close: %v", err)
	}
	if _, err := b.Transmit(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Transmit after Close: %v", err)
	}
	b.Release(bufs) // no-op, no panic
	if _, ok := b.NextDelivery(); ok {
		t.Errorf("frames still in flight to a closed end")
	}
	// The other end lives on, but its frames go nowhere.
	a.Alloc(bufs[:2])
	if n, err := a.Transmit(bufs[:2]); n != 0 || !errors.Is(err, ErrPeerClosed) {
		t.Errorf("Transmit to a closed peer = %d, %v; want 0, ErrPeerClosed", n, err)
	}
	if s := a.Stats(); s.TxDropped != 2 {
		t.Errorf("TxDropped = %d, want 2", s.TxDropped)
	}
	if n := a.Alloc(bufs); n != 4 {
		t.Errorf("Alloc after failed Transmit = %d, want 4: Transmit must take buffers back", n)
	}
}

// TestPipeConcurrent runs the two ends in two goroutines while a third
// reads stats and wakes them; run it with -race.
func TestPipeConcurrent(t *testing.T) {
	const n = 20000
	a, b := NewPipe(PipeConfig{Buffers: 64, Seed: 5,
		AtoB: Faults{Loss: 0.01, Reorder: 0.01, Jitter: 10 * time.Microsecond},
		BtoA: Faults{Duplicate: 0.01}})
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			a.Stats()
			b.Stats()
			b.NextDelivery()
			a.Wakeup()
			time.Sleep(100 * time.Microsecond)
		}
	})
	// Each end sends n frames and receives until the other end has sent
	// all of its frames and none is in flight any more (or a time limit).
	run := func(e *PipeEnd) {
		tx := make([][]byte, 16)
		rx := make([][]byte, 16)
		sent := 0
		deadline := time.Now().Add(time.Minute) // a hang, not a slow machine
		for time.Now().Before(deadline) {
			if sent < n {
				k := e.Alloc(tx[:min(16, n-sent)])
				for i := range tx[:k] {
					tx[i] = frame(tx[i], uint64(sent+i), 64)
				}
				if m, err := e.Transmit(tx[:k]); err != nil || m != k {
					t.Errorf("Transmit = %d, %v", m, err)
					return
				}
				sent += k
			}
			got, err := e.Receive(rx, time.Millisecond)
			if err != nil {
				t.Errorf("Receive: %v", err)
				return
			}
			for _, f := range rx[:got] {
				if flips(f) != 0 {
					t.Errorf("%s: frame %d damaged", e.Info().Name, seqOf(f))
				}
			}
			e.Release(rx[:got])
			if sent == n && e.peer.Stats().TxFrames == n && e.InFlight() == 0 {
				return
			}
		}
		t.Errorf("%s: timed out", e.Info().Name)
	}
	var wg sync.WaitGroup
	wg.Go(func() { run(a) })
	wg.Go(func() { run(b) })
	wg.Wait()
	close(stop)
	bg.Wait()
	sa, sb := a.Stats(), b.Stats()
	if sb.RxFrames+sb.RxDropped != sa.TxFrames-sa.Extra["lost"] {
		t.Errorf("b received %d + dropped %d, a sent %d - lost %d", sb.RxFrames, sb.RxDropped, sa.TxFrames, sa.Extra["lost"])
	}
	if sa.RxFrames+sa.RxDropped != sb.TxFrames+sb.Extra["duplicated"] {
		t.Errorf("a received %d + dropped %d, b sent %d + duplicated %d", sa.RxFrames, sa.RxDropped, sb.TxFrames, sb.Extra["duplicated"])
	}
}

func TestPipeAllocs(t *testing.T) {
	clk := &fakeClock{}
	a, b := NewPipe(PipeConfig{Clock: clk.Now, Buffers: 64, AtoB: Faults{Loss: 0.1, Duplicate: 0.1, Corrupt: 0.1, Reorder: 0.1,
		Delay: time.Microsecond, Jitter: time.Microsecond, Rate: 1e10}})
	tx := make([][]byte, 16)
	rx := make([][]byte, 32)
	step := func() {
		k := a.Alloc(tx)
		for i := range tx[:k] {
			tx[i] = tx[i][:512]
		}
		a.Transmit(tx[:k])
		clk.Advance(time.Millisecond)
		for {
			n, _ := b.Receive(rx, 0)
			if n == 0 {
				break
			}
			b.Release(rx[:n])
		}
		b.NextDelivery()
	}
	step()
	if avg := testing.AllocsPerRun(1000, step); avg != 0 {
		t.Errorf("Alloc/Transmit/Receive/Release with faults: %v allocations per batch, want 0", avg)
	}
	// The real-clock blocking path (a frame ready, and a short wait).
	c, d := NewPipe(PipeConfig{Buffers: 64})
	block := func() {
		k := c.Alloc(tx)
		c.Transmit(tx[:k])
		n, _ := d.Receive(rx, -1)
		d.Release(rx[:n])
		n, _ = d.Receive(rx, time.Microsecond)
		d.Release(rx[:n])
	}
	block()
	if avg := testing.AllocsPerRun(1000, block); avg != 0 {
		t.Errorf("blocking Receive: %v allocations per batch, want 0", avg)
	}
}

// BenchmarkPipe measures frames/s through a pipe from one goroutine: batches
// of 32 frames transmitted, then everything deliverable received and
// released. frames/s and Gbit/s count frames delivered.
func BenchmarkPipe(b *testing.B) {
	for _, bc := range []struct {
		name   string
		size   int
		faults Faults
	}{
		{"1500/perfect", 1500, Faults{}},
		{"64/perfect", 64, Faults{}},
		{"1500/faults", 1500, Faults{Loss: 0.01, Duplicate: 0.01, Corrupt: 0.01, Reorder: 0.01, Jitter: time.Microsecond}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			x, y := NewPipe(PipeConfig{Buffers: 256, AtoB: bc.faults})
			tx := make([][]byte, 32)
			rx := make([][]byte, 64)
			b.SetBytes(int64(32 * bc.size)) // per op: one batch sent
			b.ReportAllocs()
			frames := 0
			for b.Loop() {
				k := x.Alloc(tx)
				for i := range tx[:k] {
					tx[i] = tx[i][:bc.size]
				}
				x.Transmit(tx[:k])
				for {
					n, _ := y.Receive(rx, 0)
					if n == 0 {
						break
					}
					y.Release(rx[:n])
					frames += n
				}
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(frames)/sec, "frames/s")
			b.ReportMetric(float64(frames)*float64(bc.size)*8/sec/1e9, "Gbit/s")
		})
	}
}

// BenchmarkPipeTwoGoroutines measures a sender and a blocking receiver in
// separate goroutines on the real clock. The sender keeps at most 128
// frames in flight so the receiver never runs out of buffers.
func BenchmarkPipeTwoGoroutines(b *testing.B) {
	x, y := NewPipe(PipeConfig{Buffers: 256})
	const size = 1500
	b.SetBytes(size)
	b.ReportAllocs()
	total := uint64(b.N)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rx := make([][]byte, 64)
		for got := uint64(0); got < total; {
			n, err := y.Receive(rx, -1)
			if err != nil {
				return
			}
			y.Release(rx[:n])
			got += uint64(n)
		}
	}()
	tx := make([][]byte, 32)
	deadline := time.Now().Add(time.Minute)
	for sent := uint64(0); sent < total && time.Now().Before(deadline); {
		if y.InFlight() > 128 {
			runtime.Gosched()
			continue
		}
		k := x.Alloc(tx[:min(32, total-sent)])
		for i := range tx[:k] {
			tx[i] = tx[i][:size]
		}
		x.Transmit(tx[:k])
		sent += uint64(k)
	}
	<-done
	if s := y.Stats(); s.RxDropped != 0 || s.RxFrames != total {
		b.Fatalf("received %d, dropped %d of %d", s.RxFrames, s.RxDropped, total)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
}

// TestPipeConservation drives both ends with random operations (for many
// seeds) and checks after each that every buffer is accounted for exactly
// once: free, owned by the caller, or holding a frame in flight.
func TestPipeConservation(t *testing.T) {
	const buffers = 16
	for seed := range uint64(50) {
		clk := &fakeClock{}
		f := Faults{Loss: 0.1, Duplicate: 0.2, Corrupt: 0.1, Reorder: 0.2, ReorderGap: 2, Jitter: 3 * time.Microsecond, Rate: 1e9}
		a, b := NewPipe(PipeConfig{Seed: seed, Buffers: buffers, MTU: 200, Clock: clk.Now, AtoB: f, BtoA: f})
		rng := rand.New(rand.NewPCG(seed, 99))
		owned := map[*PipeEnd][][]byte{a: nil, b: nil}
		check := func(op string) {
			for _, e := range []*PipeEnd{a, b} {
				e.p.mu.Lock()
				var count [4]int
				for _, s := range e.state {
					count[s]++
				}
				free, flights := len(e.free), len(e.queue)+len(e.held)
				e.p.mu.Unlock()
				if count[bufFree] != free || count[bufUser] != len(owned[e]) || count[bufFlight] != flights || count[bufClaimed] != 0 ||
					free+len(owned[e])+flights != buffers {
					t.Fatalf("seed %d after %s: %s has %v by state, %d free, %d owned, %d in flight; want %d in all",
						seed, op, e.Info().Name, count, free, len(owned[e]), flights, buffers)
				}
			}
		}
		for range 2000 {
			e := a
			if rng.IntN(2) == 1 {
				e = b
			}
			bufs := make([][]byte, rng.IntN(6))
			switch op := rng.IntN(5); op {
			case 0:
				n := e.Alloc(bufs)
				owned[e] = append(owned[e], bufs[:n]...)
				check("Alloc")
			case 1, 2: // transmit or release some owned buffers
				k := rng.IntN(len(owned[e]) + 1)
				give := owned[e][:k]
				for i := range give {
					if op == 1 {
						give[i] = frame(give[i], rng.Uint64(), 16+rng.IntN(200))
					}
				}
				if op == 1 {
					e.Transmit(give)
				} else {
					e.Release(give)
				}
				owned[e] = slices.Clone(owned[e][k:])
				check("Transmit/Release")
			case 3:
				n, err := e.Receive(bufs, 0)
				if err != nil {
					t.Fatal(err)
				}
				owned[e] = append(owned[e], bufs[:n]...)
				check("Receive")
			case 4:
				clk.Advance(time.Duration(rng.IntN(20)) * time.Microsecond)
			}
		}
		for _, e := range []*PipeEnd{a, b} {
			e.Release(owned[e])
			owned[e] = nil
		}
		clk.Advance(time.Second)
		drain(t, a)
		drain(t, b)
		check("drain")
	}
}
