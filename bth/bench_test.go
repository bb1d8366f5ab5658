package bth

import (
	"hash/crc32"
	"net/netip"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

var benchSizes = []int{64, 1024, 4096}

func benchFields(op Opcode) FrameFields {
	return FrameFields{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2"),
		TTL: 64, SrcPort: 0xc000,
		BTH:  BTHFields{Opcode: op, PKey: 0xffff, DestQP: 0x11, PSN: 100},
		RETH: RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 4096},
	}
}

// cpuClock measures the benchmark goroutine's thread CPU time, which on a
// machine shared with other work is a steadier measure than wall time.
type cpuClock struct{ start int64 }

func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

func startCPU(b *testing.B) *cpuClock {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	b.ResetTimer()
	return &cpuClock{start: threadCPU()}
}

// report adds Mpps and Gbit/s (wall time) and cpu-ns/op and cpu-GB/s
// (thread CPU time) for frames of frameLen bytes.
func (c *cpuClock) report(b *testing.B, frameLen int) {
	cpu := float64(threadCPU() - c.start)
	pps := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(pps/1e6, "Mpps")
	b.ReportMetric(pps*float64(frameLen)*8/1e9, "Gbit/s")
	if cpu > 0 {
		b.ReportMetric(cpu/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)*float64(frameLen)/cpu, "cpu-GB/s")
	}
}

// BenchmarkDecode measures Frame.Decode alone (no ICRC).
func BenchmarkDecode(b *testing.B) {
	ff := benchFields(RCWriteOnly)
	buf := make([]byte, ff.FrameLen(64))
	n, err := Build(buf, &ff, pattern(64))
	if err != nil {
		b.Fatal(err)
	}
	var f Frame
	b.ReportAllocs()
	c := startCPU(b)
	for range b.N {
		if f.Decode(buf[:n]) != nil {
			b.Fatal("bad frame")
		}
	}
	c.report(b, n)
}

// BenchmarkDecodeVerify measures Frame.Decode plus VerifyICRC of an RC
// RDMA WRITE ONLY frame (IPv4) with the given payload size. Bytes/s counts
// the whole frame.
func BenchmarkDecodeVerify(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			ff := benchFields(RCWriteOnly)
			buf := make([]byte, ff.FrameLen(size))
			n, err := Build(buf, &ff, pattern(size))
			if err != nil {
				b.Fatal(err)
			}
			frame := buf[:n]
			var f Frame
			b.SetBytes(int64(n))
			b.ReportAllocs()
			c := startCPU(b)
			for range b.N {
				if f.Decode(frame) != nil || !f.VerifyICRC() {
					b.Fatal("bad frame")
				}
			}
			c.report(b, n)
		})
	}
}

// BenchmarkBuild measures BuildInPlace (headers, pad, IPv4 checksum and
// ICRC around a payload already in place).
func BenchmarkBuild(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			ff := benchFields(RCWriteOnly)
			buf := make([]byte, ff.FrameLen(size))
			copy(buf[ff.HeaderLen():], pattern(size))
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			c := startCPU(b)
			for i := range b.N {
				ff.BTH.PSN = PSN(i).Add(0)
				if _, err := BuildInPlace(buf, &ff, size); err != nil {
					b.Fatal(err)
				}
			}
			c.report(b, len(buf))
		})
	}
}

// BenchmarkCRC32 is the reference: hash/crc32 alone over a frame's bytes.
func BenchmarkCRC32(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			p := pattern(size + 78)
			b.SetBytes(int64(len(p)))
			c := startCPU(b)
			for range b.N {
				crc32.ChecksumIEEE(p)
			}
			c.report(b, len(p))
		})
	}
}
