package afpacket

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xroce/xroce/internal/netns"
)

// Frame sizes the benchmarks use: a RoCE frame with a 1 KiB and a 4 KiB
// payload would be a little larger; these are whole Ethernet frames.
var benchSizes = []int{1024, 4096}

// benchBatch is the number of frames per Transmit or Receive call.
const benchBatch = 64

// benchLimit bounds every benchmark loop in time whatever b.N is.
const benchLimit = 30 * time.Second

func report(b *testing.B, frames int, size int, elapsed time.Duration) {
	fps := float64(frames) / elapsed.Seconds()
	b.ReportMetric(fps, "frames/s")
	b.ReportMetric(fps*float64(size)*8/1e9, "Gbit/s")
}

// BenchmarkVethTX measures Alloc + header write + Transmit (sendmmsg) of
// batches of 64 frames on one end of a veth pair. The frames go to an
// unknown MAC, so the peer's kernel drops them on arrival (PACKET_OTHERHOST)
// without further work; on veth that arrival runs on the sending CPU and is
// part of the cost.
func BenchmarkVethTX(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			n := newTestNet(b, netns.Config{MTU: 9000}, Config{})
			a := n.ba
			a.dstMAC = net.HardwareAddr{0x02, 0x78, 0x72, 0xee, 0xee, 0xee}
			tmpl := a.build(make([]byte, size), frameSpec{size: size})
			bufs := make([][]byte, benchBatch)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			sent := 0
			for sent < b.N && time.Since(start) < benchLimit {
				k := n.b.Alloc(bufs[:min(benchBatch, b.N-sent)])
				for i := range bufs[:k] {
					bufs[i] = bufs[i][:size]
					copy(bufs[i][:64], tmpl) // headers, as a stack writes them in place
				}
				got, err := n.b.Transmit(bufs[:k])
				if err != nil {
					b.Fatalf("Transmit: %v", err)
				}
				sent += got
			}
			elapsed := time.Since(start)
			b.StopTimer()
			report(b, sent, size, elapsed)
		})
	}
}

// BenchmarkVethRX measures Receive (recvmmsg) + Release on one end of a veth
// pair while a goroutine floods it with RoCE frames from the other end
// through a second link. The receiving host runs ListenDiscard so its kernel
// drops its copy of each datagram quietly. Frames the receiver was too slow
// for are dropped by its kernel and reported as drops/frame.
func BenchmarkVethRX(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			n := newTestNet(b, netns.Config{MTU: 9000}, Config{})
			var d *Discard
			if err := n.pair.A.Do(func() error {
				var err error
				d, err = ListenDiscard(roceV2Port)
				return err
			}); err != nil {
				b.Fatalf("ListenDiscard: %v", err)
			}
			defer d.Close()
			tmpl := n.ba.build(make([]byte, size), frameSpec{size: size})

			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				bufs := make([][]byte, benchBatch)
				deadline := time.Now().Add(benchLimit + 5*time.Second)
				for !stop.Load() && time.Now().Before(deadline) {
					k := n.b.Alloc(bufs)
					for i := range bufs[:k] {
						bufs[i] = bufs[i][:size]
						copy(bufs[i][:64], tmpl)
					}
					n.b.Transmit(bufs[:k])
				}
			}()
			defer func() {
				stop.Store(true)
				n.a.Wakeup()
				wg.Wait()
			}()

			before := n.a.Stats()
			bufs := make([][]byte, benchBatch)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			got := 0
			for got < b.N && time.Since(start) < benchLimit {
				k, err := n.a.Receive(bufs, time.Second)
				if err != nil {
					b.Fatalf("Receive: %v", err)
				}
				if k == 0 {
					b.Fatalf("no frame for a second after %d", got)
				}
				n.a.Release(bufs[:k])
				got += k
			}
			elapsed := time.Since(start)
			b.StopTimer()
			report(b, got, size, elapsed)
			after := n.a.Stats()
			drops := after.Extra["kernel_drops"] - before.Extra["kernel_drops"]
			b.ReportMetric(float64(drops)/float64(max(got, 1)), "drops/frame")
		})
	}
}
