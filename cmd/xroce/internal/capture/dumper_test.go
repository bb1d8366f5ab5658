package capture

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
)

// FuzzDump feeds arbitrary bytes to dump as a capture file: it may fail, but
// never panic.
func FuzzDump(f *testing.F) {
	good, err := os.ReadFile(filepath.Join(clitest.Captures, "06_atomic_bw.pcap"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good[:min(len(good), 600)])
	// The CM exchange on QP 1 (REQ, REP), decoded as MADs.
	rping, err := os.ReadFile(filepath.Join(clitest.Captures, "09_rping_rdmacm.pcap"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(rping[:min(len(rping), 24+2*(16+322))])
	f.Add([]byte{0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0})
	// A header-only frame: the first record cut to 100 bytes by a snap length.
	read, err := os.ReadFile(filepath.Join(clitest.Captures, "05_read_bw_s8192.pcap"))
	if err != nil {
		f.Fatal(err)
	}
	second := 24 + 16 + int(binary.LittleEndian.Uint32(read[24+8:]))
	cut := append(append([]byte(nil), read[:24]...), read[second:second+16+100]...)
	binary.LittleEndian.PutUint32(cut[24+8:], 100)
	f.Add(cut)
	f.Fuzz(func(t *testing.T, data []byte) {
		src, err := openCapture(bytes.NewReader(data))
		if err != nil {
			return
		}
		d := NewDumper(&bytes.Buffer{}, Options{Verbose: true, Hexdump: true})
		_ = d.run(src)
		d.Summary()
	})
}
