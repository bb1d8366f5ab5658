package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/roce"
)

var (
	ipA, ipB   = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	macA, macB = net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

// pipeDevices returns two devices joined by an in-memory pipe with faults.
func pipeDevices(t testing.TB, f link.Faults, seed uint64) (*roce.Device, *roce.Device) {
	t.Helper()
	a, b := link.NewPipe(link.PipeConfig{Seed: seed + 1, AtoB: f, BtoA: f, Buffers: 2048, MACA: macA, MACB: macB})
	da, err := roce.NewDevice([]link.Link{a}, roce.Config{Addrs: []netip.Addr{ipA},
		Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := roce.NewDevice([]link.Link{b}, roce.Config{Addrs: []netip.Addr{ipB},
		Neighbors: map[netip.Addr]net.HardwareAddr{ipA: macA}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return da, db
}

// pair connects two Conns over the devices, with net.Pipe as side channel.
func pair(t testing.TB, da, db *roce.Device, cfg Config) (*Conn, *Conn) {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	sa, sb := net.Pipe()
	defer sa.Close()
	defer sb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := setup(ctx, db, sb, false, cfg)
		ch <- res{c, err}
	}()
	a, err := setup(ctx, da, sa, true, cfg)
	r := <-ch
	if err != nil || r.err != nil {
		t.Fatalf("setup: client %v, server %v", err, r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// pump writes n random bytes from w in random sizes up to maxw, and reads
// them on r in random sizes up to maxr; the CRCs must match.
func transfer(t *testing.T, w, r net.Conn, n, maxw, maxr int, seed uint64) {
	t.Helper()
	errs := make(chan error, 1)
	var sum uint32
	go func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		buf := make([]byte, maxw)
		for left := n; left > 0; {
			k := min(left, 1+rng.IntN(maxw))
			for i := range buf[:k] {
				buf[i] = byte(rng.Uint32())
			}
			sum = crc32.Update(sum, crc32.IEEETable, buf[:k])
			if _, err := w.Write(buf[:k]); err != nil {
				errs <- fmt.Errorf("write: %w", err)
				return
			}
			left -= k
		}
		errs <- nil
	}()
	rng := rand.New(rand.NewPCG(seed, 2))
	buf := make([]byte, maxr)
	var got uint32
	for left := n; left > 0; {
		k, err := r.Read(buf[:min(left, 1+rng.IntN(maxr))])
		if err != nil {
			t.Fatalf("read with %d left: %v", left, err)
		}
		got = crc32.Update(got, crc32.IEEETable, buf[:k])
		left -= k
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if got != sum {
		t.Fatalf("crc %#x, want %#x", got, sum)
	}
}

func TestImm(t *testing.T) {
	for _, c := range []struct{ k, m, b uint32 }{{0, 0, 0}, {1, 127, 1<<22 - 1}, {2, 5, 12345}, {7, 1, 1}} {
		k, m, b := decodeImm(encodeImm(c.k, c.m, c.b))
		if k != c.k || m != c.m || b != c.b {
			t.Errorf("decodeImm(encodeImm(%d, %d, %d)) = %d, %d, %d", c.k, c.m, c.b, k, m, b)
		}
	}
}

func TestPipeRandomSizes(t *testing.T) {
	for _, ring := range []int{4 << 10, 64 << 10, 1 << 20} {
		t.Run(fmt.Sprint(ring), func(t *testing.T) {
			da, db := pipeDevices(t, link.Faults{}, 0)
			a, b := pair(t, da, db, Config{RingSize: ring})
			transfer(t, a, b, 8<<20, 100<<10, 70<<10, 1)
			transfer(t, a, b, 1<<20, 100, 1000, 2)
			transfer(t, b, a, 1<<20, 3000, 50, 3)
			t.Logf("a %+v", a.Stats())
		})
	}
}

// Both directions at once, small rings: neither side starves.
func TestPipeBothWays(t *testing.T) {
	da, db := pipeDevices(t, link.Faults{}, 0)
	a, b := pair(t, da, db, Config{RingSize: 8 << 10})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		transfer(t, a, b, 4<<20, 20<<10, 5<<10, 4)
	}()
	transfer(t, b, a, 4<<20, 300, 9<<10, 5)
	wg.Wait()
}

// Loss, duplicates, reordering and corruption each way: RC recovers and
// both directions arrive intact. Each seed runs in a synctest bubble:
// the retransmissions are on fake time.
func TestPipeLossy(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := link.Faults{Loss: 0.02, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.005}
				da, db := pipeDevices(t, f, seed*10)
				// Short ACK timeout for speed, so retry forever (7 tries may not do under the race detector).
				a, b := pair(t, da, db, Config{RingSize: 64 << 10, Linger: time.Second, Connect: roce.ConnectOptions{Timeout: 10, RetryCnt: 7}})
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					transfer(t, a, b, 2<<20, 10<<10, 10<<10, seed)
				}()
				transfer(t, b, a, 1<<20, 1000, 3000, seed+100)
				wg.Wait()
			})
		})
	}
}

// CloseWrite: the peer reads everything, then EOF, and can still answer.
func TestPipeHalfClose(t *testing.T) {
	da, db := pipeDevices(t, link.Faults{}, 0)
	a, b := pair(t, da, db, Config{})
	msg := bytes.Repeat([]byte("half-close "), 10000)
	if _, err := a.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after CloseWrite: %v, want net.ErrClosed", err)
	}
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("ReadAll: %d bytes, %v; want %d", len(got), err, len(msg))
	}
	if _, err := b.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	b.Close()
	got, err = io.ReadAll(a)
	if err != nil || string(got) != "reply" {
		t.Fatalf("ReadAll after peer close: %q, %v", got, err)
	}
}

// Close delivers what was written before it.
func TestPipeGracefulClose(t *testing.T) {
	da, db := pipeDevices(t, link.Faults{}, 0)
	a, b := pair(t, da, db, Config{RingSize: 64 << 10})
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Write(msg)
		done <- errors.Join(err, a.Close())
	}()
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("ReadAll: %d bytes, %v", len(got), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after close: %v, want net.ErrClosed", err)
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second close: %v, want net.ErrClosed", err)
	}
}

// Read and Write deadlines end blocked calls at the deadline, also one
// set while the call waits, and can be cleared. It runs in a synctest
// bubble: the calls end at their deadlines exactly.
func TestPipeDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, link.Faults{}, 0)
		a, b := pair(t, da, db, Config{RingSize: 4 << 10})
		start := time.Now()
		a.SetReadDeadline(start.Add(20 * time.Millisecond))
		_, err := a.Read(make([]byte, 10))
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past deadline: %v, want os.ErrDeadlineExceeded", err)
		}
		if el := time.Since(start); el != 20*time.Millisecond {
			t.Errorf("read ended after %v, want its deadline, 20ms", el)
		}
		// A pending Read is woken by a deadline set later.
		a.SetReadDeadline(time.Time{})
		errc := make(chan error, 1)
		go func() {
			_, err := a.Read(make([]byte, 10))
			errc <- err
		}()
		time.Sleep(10 * time.Millisecond)
		a.SetReadDeadline(time.Now())
		if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("pending read: %v", err)
		}
		// A Write blocked on a full ring times out with what it wrote.
		start = time.Now()
		b.SetWriteDeadline(start.Add(50 * time.Millisecond))
		n, err := b.Write(make([]byte, 64<<10))
		if !errors.Is(err, os.ErrDeadlineExceeded) || n != 4<<10 {
			t.Fatalf("write to full ring: %d, %v; want 4096, deadline", n, err)
		}
		if el := time.Since(start); el != 50*time.Millisecond {
			t.Errorf("write ended after %v, want its deadline, 50ms", el)
		}
		// Clearing the deadline makes the connection usable again.
		a.SetReadDeadline(time.Time{})
		b.SetWriteDeadline(time.Time{})
		if _, err := io.ReadFull(a, make([]byte, 4<<10)); err != nil {
			t.Fatal(err)
		}
		transfer(t, b, a, 4<<10, 1<<10, 1<<10, 9)
	})
}

// Close wakes blocked Reads and Writes with net.ErrClosed. It runs in a
// synctest bubble: the calls are blocked when Close comes.
func TestPipeCloseWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, link.Faults{}, 0)
		a, _ := pair(t, da, db, Config{RingSize: 4 << 10, Linger: 100 * time.Millisecond})
		errc := make(chan error, 2)
		go func() {
			_, err := a.Read(make([]byte, 10))
			errc <- err
		}()
		go func() {
			_, err := a.Write(make([]byte, 64<<10))
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		a.Close()
		for range 2 {
			if err := <-errc; !errors.Is(err, net.ErrClosed) {
				t.Errorf("blocked call after Close: %v, want net.ErrClosed", err)
			}
		}
	})
}

// A peer that vanishes (its device closed) is an ErrReset once the
// default retries are spent, for a writer and for a reader that then
// writes. It runs in a synctest bubble, on fake time.
func TestPipePeerCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, link.Faults{}, 0)
		a, _ := pair(t, da, db, Config{RingSize: 64 << 10})
		db.Close()
		a.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		var err error
		for i := 0; i < 1000 && err == nil; i++ {
			_, err = a.Write(make([]byte, 1000))
		}
		if !errors.Is(err, ErrReset) {
			t.Fatalf("write to a crashed peer: %v, want ErrReset", err)
		}
		// The first write's message timed out on its first try and each
		// of its 6 retries: 7 × 4.096 µs × 2^14, exactly on fake time.
		if el, want := time.Since(start), 7*(4096*time.Nanosecond<<14); el != want {
			t.Errorf("ErrReset after %v, want %v", el, want)
		}
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, ErrReset) {
			t.Fatalf("read after reset: %v, want ErrReset", err)
		}
	})
}

// The direct path: large reads are advertised and filled in place, small
// writes still go through the ring; the byte sequence is exact across the
// switches, in both directions at once and under loss. Each case runs in
// a synctest bubble, on fake time.
func TestPipeDirect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       link.Faults
		connect roce.ConnectOptions
	}{
		{"clean", link.Faults{}, roce.ConnectOptions{}},
		// Short ACK timeout for speed, so retry forever: go-back-N on
		// 600 KiB DIRECT writes at 2% loss may take more than 7 tries
		// under the race detector.
		{"lossy", link.Faults{Loss: 0.02, Duplicate: 0.01, Reorder: 0.01}, roce.ConnectOptions{Timeout: 10, RetryCnt: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				da, db := pipeDevices(t, tc.f, 7)
				cfg := Config{RingSize: 64 << 10, DirectThreshold: 16 << 10, Connect: tc.connect, Linger: time.Second}
				a, b := pair(t, da, db, cfg)
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					transfer(t, a, b, 8<<20, 300<<10, 600<<10, 21)
				}()
				transfer(t, b, a, 4<<20, 40<<10, 64<<10, 22)
				wg.Wait()
				transfer(t, a, b, 1<<20, 100, 32<<10, 23) // small writes, large reads
				sa, sb := a.Stats(), b.Stats()
				t.Logf("a %+v", sa)
				t.Logf("b %+v", sb)
				if sa.DirectBytes == 0 || sb.DirectReads == 0 {
					t.Errorf("nothing went direct: a %+v, b %+v", sa, sb)
				}
				if sa.IndirectBytes == 0 {
					t.Errorf("nothing went through the ring")
				}
			})
		})
	}
}

// A Read deadline with an advert outstanding withdraws it; the stream
// stays exact afterwards, and CloseWrite declines a held advert. It runs
// in a synctest bubble, on fake time.
func TestPipeDirectDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		da, db := pipeDevices(t, link.Faults{}, 0)
		a, b := pair(t, da, db, Config{DirectThreshold: 4 << 10})
		for range 3 {
			b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if _, err := b.Read(make([]byte, 64<<10)); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read: %v, want deadline", err)
			}
		}
		b.SetReadDeadline(time.Time{})
		transfer(t, a, b, 2<<20, 100<<10, 100<<10, 31)
		// b advertises, then a's CloseWrite must decline before FIN.
		errc := make(chan error, 1)
		go func() {
			_, err := b.Read(make([]byte, 64<<10))
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if err := a.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != io.EOF {
			t.Fatalf("read after CloseWrite with an advert: %v, want EOF", err)
		}
		if s := b.Stats(); s.Adverts == 0 || s.Declines == 0 {
			t.Errorf("stats %+v: want adverts and declines", s)
		}
	})
}

// Reads that spin on the CQ (Config.ReadSpin): data both ways, a
// ping-pong, a read deadline and a Close while a Read spins.
func TestPipeReadSpin(t *testing.T) {
	da, db := pipeDevices(t, link.Faults{}, 0)
	cfg := Config{RingSize: 64 << 10, ReadSpin: 200 * time.Microsecond}
	a, b := pair(t, da, db, cfg)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		transfer(t, a, b, 4<<20, 20<<10, 5<<10, 51)
	}()
	transfer(t, b, a, 2<<20, 300, 9<<10, 52)
	wg.Wait()
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for range 1000 {
			if _, err := io.ReadFull(b, buf); err != nil {
				errc <- err
				return
			}
			if _, err := b.Write(buf); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, 64)
	for i := range 1000 {
		buf[0] = byte(i)
		if _, err := a.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(a, buf); err != nil || buf[0] != byte(i) {
			t.Fatalf("round trip %d: %v, byte %d", i, err, buf[0])
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	a.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := a.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	a.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.Close()
	}()
	if _, err := a.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read during Close: %v, want net.ErrClosed", err)
	}
}
