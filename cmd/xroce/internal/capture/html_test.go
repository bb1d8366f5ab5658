package capture

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/viz"
)

// buildPage reads a capture as dump --html does and returns the model.
func buildPage(t *testing.T, path string) *viz.Capture {
	t.Helper()
	d := NewDumper(io.Discard, Options{Quiet: true})
	d.HTML = NewHTMLPage(filepath.Base(path), "test", nil)
	if err := d.File(path); err != nil {
		t.Fatal(err)
	}
	return d.HTML.Finish()
}

func TestDumpHTMLMarks(t *testing.T) {
	path, want := clitest.LossyCapture(t)
	c := buildPage(t, path)
	if c.Frames != 19 || c.Skipped != 1 || len(c.Packets) != 18 {
		t.Fatalf("%d frames, %d skipped, %d packets; want 19, 1, 18", c.Frames, c.Skipped, len(c.Packets))
	}
	for _, p := range c.Packets {
		if p.Marks != want[p.N] {
			t.Errorf("packet %d (%s PSN %d): marks %b, want %b (note %q)", p.N, p.Opcode, p.PSN, p.Marks, want[p.N], p.Note)
		}
	}
	byN := func(n int) *viz.Packet { return &c.Packets[n-1] }
	if p := byN(10); p.RNRWait != 1280*time.Microsecond {
		t.Errorf("RNR wait %v, want 1.28ms", p.RNRWait)
	}
	if p := byN(15); p.Missing != 2 {
		t.Errorf("gap of %d PSNs, want 2", p.Missing)
	}
	if p := byN(3); !strings.Contains(p.Note, "lost: never reached 198.18.0.2 (NAK #5)") {
		t.Errorf("lost packet's note %q", p.Note)
	}
	if p := byN(6); !strings.Contains(p.Note, "retransmission of PSN 101 (last sent in #3)") {
		t.Errorf("retransmission's note %q", p.Note)
	}
	if p := byN(2); !p.Acked || !p.Response || p.Data {
		t.Errorf("ACK: acked %v response %v data %v", p.Acked, p.Response, p.Data)
	}
	// The ACKs answer A's requests: A's QP is the ACKs' destination QP.
	if len(c.Pairs) != 2 {
		t.Fatalf("pairs %+v, want RC and UD", c.Pairs)
	}
	rc, ud := c.Pairs[0], c.Pairs[1]
	if rc.Transport != "RC" || rc.A.Addr != "198.18.0.1" || rc.A.QP != 0x11 || !rc.A.QPKnown || rc.B.QP != 0x22 {
		t.Errorf("RC pair %+v, want 198.18.0.1 QP 0x11 and 198.18.0.2 QP 0x22", rc)
	}
	if ud.Transport != "UD" || ud.A.QP != 0x44 || ud.B.QP != 0x33 {
		t.Errorf("UD pair %+v, want QP 0x44 (the DETH's) and QP 0x33", ud)
	}
	for _, p := range c.Packets {
		switch {
		case p.N == 17 && p.Pair != -1:
			t.Errorf("the malformed packet has pair %d", p.Pair)
		case p.N == 18 && p.Pair != 1, p.N < 17 && p.Pair != 0:
			t.Errorf("packet %d in pair %d", p.N, p.Pair)
		case p.N < 17 && p.FromA != (p.Src == "198.18.0.1"):
			t.Errorf("packet %d from %s: FromA %v", p.N, p.Src, p.FromA)
		}
	}
	// The bit diagrams: Ethernet, IPv4, UDP, BTH, (RETH), AETH..., ICRC in wire order.
	var names []string
	for _, h := range byN(5).Headers {
		names = append(names, h.Name)
	}
	if got := strings.Join(names, ","); got != "Ethernet,IPv4,UDP,BTH,AETH,Payload,ICRC" {
		t.Errorf("NAK's headers %s", got)
	}
	var f bth.Frame
	frames := clitest.RealFrames(t, "01_rc_pingpong.pcap", 1)
	if err := f.Decode(frames[0]); err != nil {
		t.Fatal(err)
	}
	hs := frameHeaders(&f)
	if icrc := hs[len(hs)-1]; icrc.Name != "ICRC" || icrc.Fields[0].Value != "0x888ebcd6" {
		t.Errorf("ICRC field %+v, want Wireshark's 0x888ebcd6 (wire order)", icrc)
	}
	bits := 0
	for _, fl := range hs[3].Fields {
		bits += fl.Bits
	}
	if hs[3].Name != "BTH" || bits != 96 {
		t.Errorf("%s has %d bits, want BTH's 96", hs[3].Name, bits)
	}
}

// TestDumpHTMLDamaged draws every one-byte corruption and truncation of the
// crafted capture's frames: no panic, and a page comes out.
func TestDumpHTMLDamaged(t *testing.T) {
	path, _ := clitest.LossyCapture(t)
	var frames [][]byte
	src, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ps, err := openCapture(src)
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, _, err := ps.Next()
		if err != nil {
			break
		}
		for i := range f {
			g := bytes.Clone(f)
			g[i] ^= 0x5a
			frames = append(frames, g, bytes.Clone(f[:i]))
		}
	}
	d := NewDumper(io.Discard, Options{Quiet: true})
	d.HTML = NewHTMLPage("damaged", "test", nil)
	if err := d.File(clitest.WriteCapture(t, false, layers.LinkTypeEthernet, frames)); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "p.html")
	if err := d.HTML.Write(page); err != nil {
		t.Fatal(err)
	}
	c := d.HTML.Finish()
	t.Logf("%d frames: %d packets, %d pairs", c.Frames, len(c.Packets), len(c.Pairs))
	if c.Frames != len(frames) {
		t.Errorf("%d frames drawn of %d", c.Frames, len(frames))
	}
}
