//go:build linux

package xdp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/internal/netns"
)

// The benchmarks push RoCE-looking frames between two namespaces over veth
// (copy mode), one op being one frame:
//
//	go test ./xdp -run '^$' -bench Veth -benchtime 2s
//
// BenchmarkVethTX times the sender: it transmits as fast as it can while a
// goroutine drains the peer socket; frames the receiver could not keep up
// with are reported as rx-lost-%. In copy mode on veth the sender's sendto
// also runs the peer's receive path (veth NAPI, the XDP program, the copy
// into the peer's UMEM) in softirq on the sender's CPU; tx-frames/cpu-s is
// the rate one core doing only that would reach, from the sender thread's
// CPU time. BenchmarkVethRX
// times the receiver: a goroutine sends, staying within a window of frames
// ahead of it so nothing is lost, and each op is one frame received and
// checked for its sequence number.

// benchCases are the frame sizes (Ethernet header to ICRC) and XDP attach
// modes measured.
var benchCases = []struct {
	size   int
	attach string
	spin   time.Duration
}{
	{1024, AttachDriver, 0}, {4096, AttachDriver, 0},
	{1024, AttachGeneric, 0}, {4096, AttachGeneric, 0},
	{1024, AttachDriver, 50 * time.Microsecond}, {4096, AttachDriver, 50 * time.Microsecond},
}

// benchPair makes the veth pair and devices; 4 KiB frames need an MTU above
// a chunk's receive room, so multi-buffer is on for them.
func benchPair(b *testing.B, size int, attach string, spin time.Duration) (*netns.Pair, *Socket, *Socket) {
	mtu := 1500
	if size > 1500 {
		mtu = 9000
	}
	p, da, db := pairT(b, netns.Config{MTU: mtu}, Config{Attach: attach, Spin: spin})
	return p, da.Sockets()[0], db.Sockets()[0]
}

// stamp writes the template's headers and the sequence number into a
// transmit buffer: the per-frame work of a stack building in place.
func stamp(buf, tmpl []byte, seq uint32) []byte {
	buf = buf[:len(tmpl)]
	copy(buf[:hdrLen+4], tmpl)
	binary.BigEndian.PutUint32(buf[hdrLen:], seq)
	return buf
}

// drain receives and releases frames until stop is closed, counting them.
func drain(s *Socket, count *atomic.Int64, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	bufs := make([][]byte, 64)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, err := s.Receive(bufs, 10*time.Millisecond)
		if err != nil {
			return
		}
		count.Add(int64(n))
		s.Release(bufs[:n])
	}
}

func BenchmarkVethTX(b *testing.B) {
	for _, bc := range benchCases {
		size := bc.size
		name := fmt.Sprintf("%dB/%s", size, bc.attach)
		if bc.spin > 0 {
			name += "/spin" + bc.spin.String()
		}
		b.Run(name, func(b *testing.B) {
			p, tx, rx := benchPair(b, size, bc.attach, bc.spin)
			tmpl := buildFrame(make([]byte, size), p.A, p.B, roceUDPPort, 0, size)
			var received atomic.Int64
			stop, done := make(chan struct{}), make(chan struct{})
			go drain(rx, &received, stop, done)

			bufs := make([][]byte, 64)
			deadline := time.Now().Add(60 * time.Second)
			// The sender stays on one thread so that its CPU time,
			// kernel work included, can be told apart.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0, tcpu0 := time.Now(), cpuTime(), threadCPUTime()
			var seq uint32
			for sent := 0; sent < b.N && time.Now().Before(deadline); {
				n := tx.Alloc(bufs[:min(len(bufs), b.N-sent)])
				for i := range n {
					bufs[i] = stamp(bufs[i], tmpl, seq)
					seq++
				}
				m, err := tx.Transmit(bufs[:n])
				if err != nil {
					b.Fatalf("Transmit: %v", err)
				}
				sent += m
			}
			elapsed, cpu1, tcpu1 := time.Since(start), cpuTime(), threadCPUTime()
			b.StopTimer()
			// Let the receiver catch up, then stop it.
			for wait := time.Now().Add(time.Second); received.Load() < int64(b.N) && time.Now().Before(wait); {
				time.Sleep(time.Millisecond)
			}
			close(stop)
			<-done
			report(b, b.N, size, elapsed, cpu1-cpu0)
			b.ReportMetric(100*float64(int64(b.N)-received.Load())/float64(b.N), "rx-lost-%")
			b.ReportMetric(float64(tx.Stats().Wakeups)/float64(b.N), "kicks/frame")
			// What one core running only the sender could do.
			b.ReportMetric(float64(b.N)/(tcpu1-tcpu0).Seconds(), "tx-frames/cpu-s")
		})
	}
}

func BenchmarkVethRX(b *testing.B) {
	for _, bc := range benchCases {
		size := bc.size
		name := fmt.Sprintf("%dB/%s", size, bc.attach)
		if bc.spin > 0 {
			name += "/spin" + bc.spin.String()
		}
		b.Run(name, func(b *testing.B) {
			p, tx, rx := benchPair(b, size, bc.attach, bc.spin)
			tmpl := buildFrame(make([]byte, size), p.A, p.B, roceUDPPort, 0, size)
			const window = 1024 // well inside the receiver's 2048-entry rings
			var received atomic.Int64
			stop := make(chan struct{})
			senderDone := make(chan error, 1)
			go func() {
				bufs := make([][]byte, 64)
				var seq uint32
				for sent := 0; sent < b.N; {
					select {
					case <-stop:
						senderDone <- nil
						return
					default:
					}
					want := min(len(bufs), b.N-sent, window-(sent-int(received.Load())))
					if want <= 0 {
						runtime.Gosched() // the receiver is behind: let it run
						continue
					}
					n := tx.Alloc(bufs[:want])
					for i := range n {
						bufs[i] = stamp(bufs[i], tmpl, seq)
						seq++
					}
					m, err := tx.Transmit(bufs[:n])
					if err != nil {
						senderDone <- err
						return
					}
					sent += m
				}
				senderDone <- nil
			}()

			bufs := make([][]byte, 64)
			deadline := time.Now().Add(60 * time.Second)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0, tcpu0 := time.Now(), cpuTime(), threadCPUTime()
			var got int
			for got < b.N && time.Now().Before(deadline) {
				n, err := rx.Receive(bufs, 100*time.Millisecond)
				if err != nil {
					b.Fatalf("Receive: %v", err)
				}
				for _, f := range bufs[:n] {
					if seq := binary.BigEndian.Uint32(f[hdrLen:]); seq != uint32(got) || len(f) != size {
						b.Fatalf("frame %d: sequence %d, %d bytes (lost or reordered)", got, seq, len(f))
					}
					got++
				}
				rx.Release(bufs[:n])
				received.Store(int64(got))
			}
			elapsed, cpu1, tcpu1 := time.Since(start), cpuTime(), threadCPUTime()
			b.StopTimer()
			close(stop)
			if err := <-senderDone; err != nil {
				b.Fatalf("sender: %v", err)
			}
			if got < b.N {
				b.Fatalf("received %d of %d frames in 60 s", got, b.N)
			}
			report(b, got, size, elapsed, cpu1-cpu0)
			// What one core running only the receiver could do.
			b.ReportMetric(float64(got)/(tcpu1-tcpu0).Seconds(), "rx-frames/cpu-s")
		})
	}
}

// report adds frames/s and Gbit/s (frame bytes, no Ethernet preamble or
// FCS), and the CPU time the process spent (user and system, all threads,
// so the kernel's work for both ends) per frame: on a shared machine the
// wall-clock rates depend on what else runs, the CPU cost much less.
func report(b *testing.B, frames, size int, elapsed, cpu time.Duration) {
	sec := elapsed.Seconds()
	if sec <= 0 || frames == 0 {
		return
	}
	b.ReportMetric(float64(frames)/sec, "frames/s")
	b.ReportMetric(float64(frames)*float64(size)*8/sec/1e9, "Gbit/s")
	b.ReportMetric(float64(cpu)/float64(frames), "cpu-ns/frame")
}

// threadCPUTime returns the calling thread's user plus system CPU time.
func threadCPUTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTime returns the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAllocRelease measures the socket's own bookkeeping for a batch of
// 64 transmit buffers (Alloc, then Release), without the kernel.
func BenchmarkAllocRelease(b *testing.B) {
	_, da, _ := pairT(b, netns.Config{}, Config{})
	s := da.Sockets()[0]
	bufs := make([][]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		n := s.Alloc(bufs)
		s.Release(bufs[:n])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/64, "ns/buffer")
}
