package bth

import (
	"hash/crc32"
	"testing"
)

func BenchmarkTmpDecode(b *testing.B) {
	ff := benchFields(RCWriteOnly)
	buf := make([]byte, ff.FrameLen(64))
	n, _ := Build(buf, &ff, pattern(64))
	var f Frame
	for range b.N {
		f.Decode(buf[:n])
	}
}
func BenchmarkTmpVerify(b *testing.B) {
	ff := benchFields(RCWriteOnly)
	buf := make([]byte, ff.FrameLen(64))
	n, _ := Build(buf, &ff, pattern(64))
	var f Frame
	f.Decode(buf[:n])
	for range b.N {
		f.VerifyICRC()
	}
}
func BenchmarkTmpCRC48(b *testing.B) {
	p := pattern(48)
	for range b.N {
		crc32.Update(5, crc32.IEEETable, p)
	}
}
func BenchmarkTmpCRC64(b *testing.B) {
	p := pattern(64)
	for range b.N {
		crc32.Update(5, crc32.IEEETable, p)
	}
}
func BenchmarkTmpCRC100(b *testing.B) {
	p := pattern(100)
	for range b.N {
		crc32.Update(5, crc32.IEEETable, p)
	}
}
