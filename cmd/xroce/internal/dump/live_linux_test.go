package dump

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/afpacket"
	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
)

// TestDumpLive captures on one end of a veth pair while the other sends
// RoCE v2 frames built with package bth, and checks the printed lines and
// the pcap written with -w.
func TestDumpLive(t *testing.T) {
	pair := netns.NewT(t, netns.Config{})
	var tx *afpacket.Link
	if err := pair.A.Do(func() (err error) {
		tx, err = afpacket.Open(pair.A.Ifname, afpacket.Config{})
		return err
	}); err != nil {
		t.Skipf("no AF_PACKET: %v", err)
	}
	defer tx.Close()

	pcap := filepath.Join(t.TempDir(), "live.pcap")
	var out bytes.Buffer
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	go func() {
		done <- pair.B.Do(func() error {
			return Cmd.Run(ctx, &base.Env{Stdout: &out, Stderr: &out}, []string{"-i", pair.B.Ifname, "-c", "4", "-w", pcap})
		})
	}()

	ff := bth.FrameFields{
		DstMAC: [6]byte(pair.B.MAC), SrcMAC: [6]byte(pair.A.MAC),
		SrcIP: pair.A.IP, DstIP: pair.B.IP, TTL: 64, SrcPort: 0xc123,
		BTH: bth.BTHFields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: 0x11, AckReq: true},
	}
	payload := bytes.Repeat([]byte("xroce"), 20)
	// Send until the capture, which starts at some point, has its four
	// frames: one frame every 10 ms, for at most 30 s (a hang).
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for psn := bth.PSN(100); ; psn++ {
		select {
		case err = <-done:
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("capture did not finish; output so far:\n%s", out.String())
			}
			bufs := make([][]byte, 1)
			if tx.Alloc(bufs) != 1 {
				t.Fatal("Alloc: no buffer")
			}
			ff.BTH.PSN = psn
			n, berr := bth.Build(bufs[0], &ff, payload)
			if berr != nil {
				t.Fatal(berr)
			}
			bufs[0] = bufs[0][:n]
			if _, terr := tx.Transmit(bufs); terr != nil {
				t.Fatal(terr)
			}
			continue
		}
		break
	}
	if err != nil {
		t.Fatalf("dump -i: %v\n%s", err, out.String())
	}
	text := out.String()
	if n := strings.Count(text, "RC SEND_ONLY"); n != 5 { // 4 lines and the opcode summary
		t.Errorf("%d SEND_ONLY mentions, want 4 packet lines and a summary row:\n%s", n, text)
	}
	if !strings.Contains(text, "198.18.0.1 > 198.18.0.2 RC SEND_ONLY") || !strings.Contains(text, "QP 0x000011") {
		t.Errorf("unexpected lines:\n%s", text)
	}
	if s := clitest.ParseSummary(t, text); s.RoCE != 4 || s.OK != 4 {
		t.Errorf("live summary %+v, want 4 RoCE frames with good ICRCs", s)
	}
	// The written capture decodes the same.
	fileOut, _, err := run(t, "dump", pcap)
	if err != nil {
		t.Fatalf("dump of the written capture: %v\n%s", err, fileOut)
	}
	if s := clitest.ParseSummary(t, fileOut); s.Packets != 4 || s.OK != 4 {
		t.Errorf("written capture: %+v, want 4 good RoCE frames", s)
	}
}
