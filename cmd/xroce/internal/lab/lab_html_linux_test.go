package lab

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/capture"
	"github.com/xroce/xroce/internal/viz"
)

// TestLabHTML runs the lab with loss and checks its page: NAKs, the
// packets they name as lost, retransmissions, hosts named A and B.
func TestLabHTML(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	pcap, page := filepath.Join(dir, "lab.pcap"), filepath.Join(dir, "lab.html")
	out, errOut, err := run(t, "lab", "--duration", "0", "--trace", "0", "--sizes", "64", "--pcap", pcap, "--html", page, "--stat-dir", "")
	if err != nil {
		t.Fatalf("lab: %v\n%s\n%s", err, out, errOut)
	}
	if !strings.Contains(out, "  html "+page+" ") {
		t.Errorf("lab does not say where the page is:\n%s", out)
	}
	if _, err := os.Stat(page); err != nil {
		t.Fatal(err)
	}
	d := capture.NewDumper(io.Discard, capture.Options{Quiet: true})
	d.HTML = capture.NewHTMLPage("lab", "test", labNames())
	if err := d.File(pcap); err != nil {
		t.Fatal(err)
	}
	c := d.HTML.Finish()
	marks := map[viz.Mark]int{}
	for _, p := range c.Packets {
		for m := viz.Mark(1); m != 0; m <<= 1 {
			if p.Marks&m != 0 {
				marks[m]++
			}
		}
	}
	t.Logf("%d packets, %d pairs, marks %v", len(c.Packets), len(c.Pairs), marks)
	if marks[viz.MarkNAK] == 0 || marks[viz.MarkLost] == 0 || marks[viz.MarkRetrans] == 0 || marks[viz.MarkCM] < 3 {
		t.Errorf("marks %v: want NAKs, lost packets, retransmissions and the CM handshake", marks)
	}
	// The lab captures what each host sends: every NAK names a request
	// that was sent, so each NAK has its lost packet.
	if marks[viz.MarkLost] > marks[viz.MarkNAK] || marks[viz.MarkGap] != 0 {
		t.Errorf("%d lost and %d gaps for %d NAKs in a capture at the senders", marks[viz.MarkLost], marks[viz.MarkGap], marks[viz.MarkNAK])
	}
	for _, p := range c.Pairs {
		if p.A.Name != "A" || p.B.Name != "B" {
			t.Errorf("pair %+v: hosts not named A and B", p)
		}
	}
}
