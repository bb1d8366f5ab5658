package qp

import (
	"encoding/binary"
	"os"
	"testing"
)

// readPcap returns the frames of a classic pcap file (Ethernet link type).
func readPcap(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 {
		t.Fatalf("%s: short pcap", name)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if binary.BigEndian.Uint32(b) == 0xa1b2c3d4 || binary.BigEndian.Uint32(b) == 0xa1b23c4d {
		bo = binary.BigEndian
	}
	var frames [][]byte
	for off := 24; off+16 <= len(b); {
		n := int(bo.Uint32(b[off+8:]))
		off += 16
		if off+n > len(b) {
			t.Fatalf("%s: truncated record", name)
		}
		frames = append(frames, b[off:off+n])
		off += n
	}
	return frames
}
