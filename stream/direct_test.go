package stream

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/roce"
)

// pat is the byte at stream offset i: a shifted, repeated or lost span
// changes what is read at some offset.
func pat(i int) byte { return byte(i ^ i>>8 ^ i>>16 ^ i>>24) }

// transferExact writes n bytes of pat from w in sizes drawn by wsize and
// reads them on r in sizes drawn by rsize, checking every byte's offset:
// exactly once and in order. Each Write and Read uses one of two buffers
// in turn, so that the registration caches see reused buffers.
func transferExact(t *testing.T, w, r net.Conn, n int, wsize, rsize func(*rand.Rand) int, seed uint64) {
	t.Helper()
	errs := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		bufs := [2][]byte{make([]byte, 4<<20), make([]byte, 4<<20)}
		for off, i := 0, 0; off < n; i++ {
			k := min(n-off, wsize(rng))
			b := bufs[i%2][:k]
			for j := range b {
				b[j] = pat(off + j)
			}
			if _, err := w.Write(b); err != nil {
				errs <- fmt.Errorf("write at %d: %w", off, err)
				return
			}
			off += k
		}
		errs <- nil
	}()
	rng := rand.New(rand.NewPCG(seed, 2))
	bufs := [2][]byte{make([]byte, 4<<20), make([]byte, 4<<20)}
	for off, i := 0, 0; off < n; i++ {
		b := bufs[i%2][:min(n-off, rsize(rng))]
		k, err := r.Read(b)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		for j, c := range b[:k] {
			if c != pat(off+j) {
				t.Fatalf("byte at offset %d is %#x, want %#x (read of %d at %d)", off+j, c, pat(off+j), k, off)
			}
		}
		off += k
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// The direct path under loss, duplication and reordering, many seeds:
// every byte arrives exactly once and in order, both ways at once, across
// the switches between ring and DIRECT (holds, declines, withdrawals after
// read deadlines), and some bytes go each way. Each seed runs in a
// synctest bubble: retransmissions, holds and deadlines are on fake time.
func TestPipeDirectFaultSweep(t *testing.T) {
	seeds := uint64(8)
	if testing.Short() {
		seeds = 3
	}
	large := func(rng *rand.Rand) int { return 256<<10 + rng.IntN(1<<20) }
	mixed := func(rng *rand.Rand) int {
		if rng.IntN(4) == 0 {
			return 1 + rng.IntN(4<<10)
		}
		return 1 + rng.IntN(1<<20)
	}
	var mu sync.Mutex
	var direct, indirect uint64
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := link.Faults{Loss: 0.01, Duplicate: 0.01, Reorder: 0.02}
				da, db := pipeDevices(t, f, 100+seed)
				cfg := Config{RingSize: 256 << 10, DirectThreshold: 64 << 10, Linger: time.Second,
					Connect: roce.ConnectOptions{Timeout: 10, RetryCnt: 7}}
				a, b := pair(t, da, db, cfg)
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					transferExact(t, a, b, 12<<20, large, large, seed)
				}()
				transferExact(t, b, a, 6<<20, mixed, mixed, seed+1000)
				wg.Wait()
				// Read deadlines that withdraw adverts, then more data.
				for range 2 {
					b.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
					b.Read(make([]byte, 1<<20))
				}
				b.SetReadDeadline(time.Time{})
				transferExact(t, a, b, 4<<20, large, mixed, seed+2000)
				sa, sb := a.Stats(), b.Stats()
				t.Logf("a %+v", sa)
				t.Logf("b %+v", sb)
				mu.Lock()
				direct += sa.DirectBytes + sb.DirectBytes
				indirect += sa.IndirectBytes + sb.IndirectBytes
				mu.Unlock()
			})
		})
	}
	// How much goes direct depends on timing; over all seeds, some must.
	if direct == 0 || indirect == 0 {
		t.Errorf("%d bytes direct, %d through the ring over all seeds: want some of each", direct, indirect)
	}
}

// Reused buffers are registered once: the caches hit. It runs in a
// synctest bubble: a Write's hold for the reader's advert times out only
// when the reader could not have sent one, never because it was slow.
func TestPipeDirectRegCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, link.Faults{}, 0)
		a, b := pair(t, da, db, Config{DirectThreshold: 64 << 10})
		one := func(*rand.Rand) int { return 1 << 20 }
		transferExact(t, a, b, 64<<20, one, one, 1)
		sa, sb := a.Stats(), b.Stats()
		t.Logf("a %+v", sa)
		t.Logf("b %+v", sb)
		if sa.DirectBytes < 32<<20 {
			t.Errorf("%d of 64 MiB direct with 1 MiB writes and reads: want most", sa.DirectBytes)
		}
		if sa.Registrations > 2*regCacheSize || sb.Registrations > 2*regCacheSize || sa.RegHits == 0 || sb.RegHits == 0 {
			t.Errorf("registrations %d and %d, hits %d and %d: want two buffers registered once each", sa.Registrations,
				sb.Registrations, sa.RegHits, sb.RegHits)
		}
	})
}
