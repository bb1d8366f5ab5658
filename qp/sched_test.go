package qp

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestTimerHeapOrder pushes and pops random deadlines, interleaved, and
// checks that every pop returns the earliest entry left.
func TestTimerHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h timerHeap
	var ref []time.Duration
	for i := range 10000 {
		if len(ref) == 0 || rng.IntN(3) != 0 {
			d := time.Duration(rng.IntN(1000))
			h.push(timerEntry{at: d})
			ref = append(ref, d)
			continue
		}
		slices.Sort(ref)
		got := h.pop()
		if got.at != ref[0] {
			t.Fatalf("pop %d: at %v, want %v", i, got.at, ref[0])
		}
		ref = ref[1:]
	}
	for len(ref) > 0 {
		slices.Sort(ref)
		if got := h.pop(); got.at != ref[0] {
			t.Fatalf("drain: at %v, want %v", got.at, ref[0])
		}
		ref = ref[1:]
	}
	if len(h) != 0 {
		t.Fatalf("heap has %d entries left", len(h))
	}
}

// TestRearmAllocs re-arms a QP's timer and lets Poll fire it, over and
// over: the heap push and pop allocate nothing (container/heap boxed each
// entry).
func TestRearmAllocs(t *testing.T) {
	e, err := NewEngine(EngineConfig{Out: &queueOut{}})
	if err != nil {
		t.Fatal(err)
	}
	var qs []*QP
	for i := range 8 {
		q, err := e.CreateQP(Config{Type: RC, QPN: uint32(0x10 + i), SendCQ: &countCQ{}, RecvCQ: &countCQ{}, Mem: newTestMem()})
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	now := time.Duration(0)
	rearm := func() {
		for i, q := range qs {
			q.schedule(now + time.Duration(len(qs)-i)*time.Microsecond)
		}
		for range qs {
			now += time.Microsecond
			e.Poll(now)
		}
		if len(e.timers) != 0 {
			t.Fatalf("%d timers left after they all fired", len(e.timers))
		}
	}
	rearm()
	if a := testing.AllocsPerRun(100, rearm); a != 0 {
		t.Errorf("re-arming %d timers: %v allocations, want 0", len(qs), a)
	}
}

func BenchmarkTimerRearm(b *testing.B) {
	var h timerHeap
	for i := range 1024 {
		h.push(timerEntry{at: time.Duration(i * 7919 % 1024)})
	}
	b.ReportAllocs()
	now := time.Duration(1024)
	for b.Loop() {
		h.pop()
		now++
		h.push(timerEntry{at: now})
	}
}
