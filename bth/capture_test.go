package bth

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
)

// readPcap returns the frames of a pcap file in testdata.
func readPcap(t testing.TB, name string) [][]byte {
	t.Helper()
	return readPcapFile(t, filepath.Join("testdata", name))
}

// readPcapFile returns the frames of a pcap file; none may be cut short.
func readPcapFile(t testing.TB, name string) [][]byte {
	t.Helper()
	fh, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var frames [][]byte
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ci.CaptureLength != ci.Length {
			t.Fatalf("%s: frame %d truncated by capture (%d of %d)", name, len(frames), ci.CaptureLength, ci.Length)
		}
		frames = append(frames, data)
	}
}

func pcapNames(t testing.TB) []string {
	names, err := filepath.Glob("testdata/*.pcap")
	if err != nil || len(names) == 0 {
		t.Fatalf("no pcaps in testdata: %v", err)
	}
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	return names
}

func TestCapturesDecode(t *testing.T) {
	for _, name := range pcapNames(t) {
		n, bad := 0, 0
		for i, b := range readPcap(t, name) {
			var f Frame
			if err := f.Decode(b); err != nil {
				t.Errorf("%s #%d: %v", name, i+1, err)
				continue
			}
			n++
			if sum, err := ICRC(f.Packet()); err != nil || sum != f.ICRC {
				t.Errorf("%s #%d: ICRC(packet) = %#x, %v; want %#x", name, i+1, sum, err, f.ICRC)
			}
			if !f.VerifyICRC() {
				bad++
				t.Errorf("%s #%d: %v ICRC %#x, computed %#x", name, i+1, f.Opcode(), f.ICRC, f.ComputeICRC())
			}
		}
		t.Logf("%s: %d roce frames, %d bad ICRC", name, n, bad)
	}
}

// reencodeHeaders encodes each decoded header from its fields and checks
// that the bytes are the same.
func reencodeHeaders(t *testing.T, where string, f *Frame) {
	t.Helper()
	check := func(name string, view []byte, enc func([]byte)) {
		if view == nil {
			return
		}
		b := make([]byte, len(view))
		enc(b)
		if string(b) != string(view) {
			t.Errorf("%s: %s re-encodes as %x, want %x", where, name, b, view)
		}
	}
	check("BTH", f.BTH, func(b []byte) { fl := f.BTH.Fields(); BTH(b).Encode(&fl) })
	check("DETH", f.DETH, func(b []byte) { fl := f.DETH.Fields(); DETH(b).Encode(&fl) })
	check("FETH", f.FETH, func(b []byte) { fl := f.FETH.Fields(); FETH(b).Encode(&fl) })
	check("RETH", f.RETH, func(b []byte) { fl := f.RETH.Fields(); RETH(b).Encode(&fl) })
	check("AtomicETH", f.AtomicETH, func(b []byte) { fl := f.AtomicETH.Fields(); AtomicETH(b).Encode(&fl) })
	check("AETH", f.AETH, func(b []byte) { fl := f.AETH.Fields(); AETH(b).Encode(&fl) })
	check("AtomicAckETH", f.AtomicAckETH, func(b []byte) { AtomicAckETH(b).Encode(f.AtomicAckETH.OrigRemoteData()) })
	check("ImmDt", f.ImmDt, func(b []byte) { ImmDt(b).Encode(f.ImmDt.Imm()) })
	check("IETH", f.IETH, func(b []byte) { IETH(b).Encode(f.IETH.RKey()) })
}

func TestICRCErrors(t *testing.T) {
	for _, p := range [][]byte{nil, {0x45}, make([]byte, 50), append([]byte{0x60}, make([]byte, 62)...), append([]byte{0x46}, make([]byte, 80)...)} {
		if _, err := ICRC(p); !errors.Is(err, ErrNotRoCE) {
			t.Errorf("ICRC(%x) error = %v, want %v", p, err, ErrNotRoCE)
		}
	}
}

func TestCapturesRebuild(t *testing.T) {
	buf := make([]byte, 10000)
	for _, name := range pcapNames(t) {
		for i, b := range readPcap(t, name) {
			var f Frame
			if err := f.Decode(b); err != nil {
				t.Fatalf("%s #%d: %v", name, i+1, err)
			}
			reencodeHeaders(t, fmt.Sprintf("%s #%d", name, i+1), &f)
			var ff FrameFields
			f.Fields(&ff)
			n, err := Build(buf, &ff, f.Payload)
			if err != nil {
				t.Fatalf("%s #%d: %v", name, i+1, err)
			}
			if string(buf[:n]) != string(b[:f.Len()]) {
				t.Errorf("%s #%d %v: rebuilt frame differs\n got %x\nwant %x", name, i+1, f.Opcode(), buf[:n], b)
			}
		}
	}
}
