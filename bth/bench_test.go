package bth

import (
	"hash/crc32"
	"net/netip"
	"strconv"
	"testing"
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

func reportRate(b *testing.B, frameLen int) {
	pps := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(pps/1e6, "Mpps")
	b.ReportMetric(pps*float64(frameLen)*8/1e9, "Gbit/s")
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
			b.ResetTimer()
			for range b.N {
				if f.Decode(frame) != nil || !f.VerifyICRC() {
					b.Fatal("bad frame")
				}
			}
			reportRate(b, n)
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
			b.ResetTimer()
			for i := range b.N {
				ff.BTH.PSN = PSN(i).Add(0)
				if _, err := BuildInPlace(buf, &ff, size); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, len(buf))
		})
	}
}

// BenchmarkCRC32 is the reference: hash/crc32 alone over a frame's bytes.
func BenchmarkCRC32(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			p := pattern(size + 78)
			b.SetBytes(int64(len(p)))
			for range b.N {
				crc32.ChecksumIEEE(p)
			}
		})
	}
}
