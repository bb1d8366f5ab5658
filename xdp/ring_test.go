//go:build linux

package xdp

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/bpf"
)

// fakeRing builds a ring over ordinary memory, with our side producing or
// consuming, starting at index start so that tests can cross the uint32 wrap.
func fakeRing(n, start uint32, producer bool) (*addrRing, *uint32, *uint32) {
	var prod, cons, flags uint32
	prod, cons = start, start
	r := &addrRing{
		ring:  ring{producer: &prod, consumer: &cons, flags: &flags, mask: n - 1, size: n},
		addrs: make([]uint64, n),
	}
	r.init(producer)
	return r, &prod, &cons
}

func TestProducerRing(t *testing.T) {
	for _, start := range []uint32{0, 1000, 1<<32 - 5} {
		r, prod, cons := fakeRing(8, start, true)
		if got, _ := r.reserve(5); got != 5 {
			t.Fatalf("start %#x: reserve(5) = %d, want 5", start, got)
		}
		if *prod != start {
			t.Fatalf("start %#x: producer moved before submit", start)
		}
		r.submit()
		if *prod != start+5 {
			t.Fatalf("start %#x: producer = %#x, want %#x", start, *prod, start+5)
		}
		// Only 3 left until the kernel consumes.
		got, idx := r.reserve(5)
		if got != 3 || idx != start+5 {
			t.Fatalf("start %#x: reserve(5) = %d at %#x, want 3 at %#x", start, got, idx, start+5)
		}
		for i := range got {
			r.set(idx+i, uint64(i))
		}
		r.submit()
		if got, _ := r.reserve(1); got != 0 {
			t.Fatalf("start %#x: reserve on full ring = %d, want 0", start, got)
		}
		// The kernel consumes 4: they become free again.
		*cons = start + 4
		got, idx = r.reserve(8)
		if got != 4 || idx != start+8 {
			t.Fatalf("start %#x: after consume reserve(8) = %d at %#x, want 4 at %#x", start, got, idx, start+8)
		}
		if r.addrs[(start+5)&r.mask] != 0 || r.addrs[(start+7)&r.mask] != 2 {
			t.Fatalf("start %#x: entries not written at index & mask", start)
		}
		r.submit()
		if o := r.outstanding(); o != 8 {
			t.Fatalf("start %#x: outstanding = %d, want 8", start, o)
		}
	}
}

func TestConsumerRing(t *testing.T) {
	for _, start := range []uint32{0, 77, 1<<32 - 3} {
		r, prod, cons := fakeRing(8, start, false)
		if n := r.pending(); n != 0 {
			t.Fatalf("start %#x: pending on empty = %d", start, n)
		}
		for i := range uint32(6) {
			r.addrs[(start+i)&r.mask] = uint64(100 + i)
		}
		*prod = start + 6
		if n := r.pending(); n != 6 {
			t.Fatalf("start %#x: pending = %d, want 6", start, n)
		}
		if a := r.get(r.cachedCons + 5); a != 105 {
			t.Fatalf("start %#x: get(5) = %d, want 105", start, a)
		}
		r.release(2)
		if *cons != start+2 {
			t.Fatalf("start %#x: consumer = %#x, want %#x", start, *cons, start+2)
		}
		// The cache still knows 4 without reloading the producer.
		*prod = start + 7
		if n := r.pending(); n != 4 {
			t.Fatalf("start %#x: pending (cached) = %d, want 4", start, n)
		}
		if n := r.refreshPending(); n != 5 {
			t.Fatalf("start %#x: refreshPending = %d, want 5", start, n)
		}
		r.release(5)
		if n := r.pending(); n != 0 || *cons != start+7 {
			t.Fatalf("start %#x: after release pending = %d consumer = %#x", start, n, *cons)
		}
	}
}

func TestNeedWakeup(t *testing.T) {
	r, _, _ := fakeRing(8, 0, true)
	if r.needWakeup() {
		t.Fatal("needWakeup with no flag")
	}
	*r.flags = unix.XDP_RING_NEED_WAKEUP
	if !r.needWakeup() {
		t.Fatal("needWakeup false with XDP_RING_NEED_WAKEUP set")
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"zero", Config{}, false},
		{"queues", Config{Queues: []int{0, 1, 3}}, false},
		{"repeated queue", Config{Queues: []int{1, 1}}, true},
		{"negative queue", Config{Queues: []int{-1}}, true},
		{"bad mode", Config{Mode: "turbo"}, true},
		{"copy", Config{Mode: ModeCopy}, false},
		{"generic", Config{Attach: AttachGeneric}, false},
		{"bad attach", Config{Attach: "hw"}, true},
		{"frame 2048", Config{FrameSize: 2048}, false},
		{"frame 3000", Config{FrameSize: 3000}, true},
		{"ring not pow2", Config{RingSize: 1000}, true},
		{"ring small", Config{RingSize: 32}, true},
		{"headroom", Config{Headroom: 256}, false},
		{"headroom big", Config{Headroom: 4000}, true},
		{"busy poll negative", Config{BusyPoll: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.cfg.withDefaults()
			if (err != nil) != tt.wantErr {
				t.Fatalf("withDefaults(%+v) error = %v, want error %v", tt.cfg, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if c.FrameSize == 0 || c.RingSize == 0 || c.RxFrames == 0 || c.TxFrames == 0 || len(c.Queues) == 0 {
				t.Fatalf("withDefaults left zero fields: %+v", c)
			}
		})
	}
}

// FuzzRingFIFO drives a producer ring and a consumer ring over the same
// memory (as our side and the kernel's would) with arbitrary batch sizes,
// starting near the uint32 wrap, and checks that every entry arrives once,
// in order, and that neither side ever sees more than the ring holds.
func FuzzRingFIFO(f *testing.F) {
	f.Add([]byte{3, 5, 8, 1, 0, 255, 7, 7, 7, 7}, uint32(1<<32-10))
	f.Add([]byte{16, 16, 16, 16, 16, 16}, uint32(0))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, uint32(1<<31))
	f.Fuzz(func(t *testing.T, ops []byte, start uint32) {
		const size = 16
		var prodIdx, consIdx, flags uint32
		prodIdx, consIdx = start, start
		mem := make([]uint64, size)
		p := &addrRing{ring: ring{producer: &prodIdx, consumer: &consIdx, flags: &flags, mask: size - 1, size: size}, addrs: mem}
		c := &addrRing{ring: ring{producer: &prodIdx, consumer: &consIdx, flags: &flags, mask: size - 1, size: size}, addrs: mem}
		p.init(true)
		c.init(false)
		var next, want uint64
		for i, op := range ops {
			n := uint32(op>>1) % (size + 4)
			if op&1 == 0 { // produce up to n
				got, idx := p.reserve(n)
				if got > n || next-want+uint64(got) > size {
					t.Fatalf("op %d: reserve(%d) = %d with %d in flight", i, n, got, next-want)
				}
				for j := range got {
					p.set(idx+j, next)
					next++
				}
				p.submit()
			} else { // consume up to n
				// pending may answer from a stale cache, but
				// never more than was produced, and never 0
				// while entries wait (it reloads when empty).
				avail := c.pending()
				if uint64(avail) > next-want || (avail == 0 && next != want) {
					t.Fatalf("op %d: pending %d with %d produced", i, avail, next-want)
				}
				k := min(avail, n)
				for j := range k {
					if got := c.get(c.cachedCons + j); got != want {
						t.Fatalf("op %d: entry %d = %d, want %d", i, j, got, want)
					}
					want++
				}
				c.release(k)
			}
		}
	})
}

func TestBPFError(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{fmt.Errorf("attach: %w", unix.ERANGE), ErrMTU},
		{fmt.Errorf("load: %w", bpf.ErrPermission), ErrPermission},
		{fmt.Errorf("attach: %w", unix.EPERM), ErrPermission},
		{fmt.Errorf("load: %w", bpf.ErrNoXDP), ErrNotSupported},
		{fmt.Errorf("load: %w", bpf.ErrNoFrags), ErrNotSupported},
		{fmt.Errorf("load: %w", bpf.ErrNoBPF), ErrNotSupported},
	}
	for _, tt := range tests {
		if got := bpfError(tt.err); !errors.Is(got, tt.want) || !errors.Is(got, tt.err) {
			t.Errorf("bpfError(%v) = %v, want it to wrap %v and the cause", tt.err, got, tt.want)
		}
	}
}
