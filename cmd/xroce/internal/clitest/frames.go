// Frames and captures for the tests of the packages that decode them
// (capture, dump, seqdiag, lab).

package clitest

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/internal/viz"
)

// Captures is where the real rxe captures live (bth/testdata, copied from
// ../shared/pcaps), found from the test's working directory, its package's
// directory in the module.
var Captures = capturesDir()

func capturesDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return "bth/testdata"
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "bth", "testdata")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "bth", "testdata")
		}
	}
}

// WriteCapture writes frames as a pcap (or pcapng) file of the given link type.
func WriteCapture(t *testing.T, ng bool, lt layers.LinkType, frames [][]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ts := time.Unix(1700000000, 0)
	if ng {
		w, err := pcapgo.NewNgWriter(f, lt)
		if err != nil {
			t.Fatal(err)
		}
		for i, fr := range frames {
			ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(fr), Length: len(fr)}
			if err := w.WritePacket(ci, fr); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, lt); err != nil {
		t.Fatal(err)
	}
	for i, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// RealFrames returns the first n frames of a real capture.
func RealFrames(t *testing.T, name string, n int) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join(Captures, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for len(out) < n {
		data, _, err := r.ReadPacketData()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// HostA and HostB are the addresses of the frames RCFrame builds for
// tests, the lab's A and B.
var (
	HostA = netip.MustParseAddr("198.18.0.1")
	HostB = netip.MustParseAddr("198.18.0.2")
)

// RCFrame builds an RC (or UD, with DETH) frame from src to dst.
func RCFrame(t *testing.T, src, dst netip.Addr, op bth.Opcode, qp uint32, psn bth.PSN, syn bth.Syndrome, n int) []byte {
	t.Helper()
	ff := bth.FrameFields{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, src.As4()[3]}, DstMAC: [6]byte{2, 0, 0, 0, 0, dst.As4()[3]},
		SrcIP: src, DstIP: dst, TTL: 64, SrcPort: 0xc011,
		BTH:  bth.BTHFields{Opcode: op, PKey: 0xffff, DestQP: qp, PSN: psn, AckReq: true},
		AETH: bth.AETHFields{Syndrome: syn},
		RETH: bth.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: uint32(n)},
		DETH: bth.DETHFields{QKey: 0x11111111, SrcQP: 0x44},
	}
	buf := make([]byte, ff.FrameLen(n))
	l, err := bth.Build(buf, &ff, make([]byte, n))
	if err != nil {
		t.Fatal(err)
	}
	return buf[:l]
}

// LossyCapture is a capture taken at A, one frame a millisecond, with one
// of each thing the page marks. want lists the marks by packet number.
func LossyCapture(t *testing.T) (path string, want map[int]viz.Mark) {
	ack, seq := bth.ACKSyndrome(bth.CreditsInvalid), bth.NakPSNSeqError
	a2b := func(op bth.Opcode, psn bth.PSN, n int) []byte { return RCFrame(t, HostA, HostB, op, 0x22, psn, 0, n) }
	b2a := func(psn bth.PSN, syn bth.Syndrome) []byte {
		return RCFrame(t, HostB, HostA, bth.RCAck, 0x11, psn, syn, 0)
	}
	bad := a2b(bth.RCSendOnly, 108, 16)
	bad[len(bad)-1] ^= 0xff
	frames := [][]byte{
		a2b(bth.RCSendOnly, 100, 64),             // 1
		b2a(100, ack),                            // 2
		a2b(bth.RCSendOnly, 101, 64),             // 3 lost: the NAK names it
		a2b(bth.RCSendOnly, 102, 64),             // 4
		b2a(101, seq),                            // 5 NAK
		a2b(bth.RCSendOnly, 101, 64),             // 6 sent again
		a2b(bth.RCSendOnly, 102, 64),             // 7 sent again
		b2a(102, ack),                            // 8
		a2b(bth.RCSendOnly, 103, 64),             // 9
		b2a(103, bth.RNRNakSyndrome(14)),         // 10 RNR NAK, 1.28 ms
		a2b(bth.RCSendOnly, 103, 64),             // 11 sent again
		b2a(103, ack),                            // 12
		a2b(bth.RCWriteOnly, 104, 64),            // 13
		b2a(104, bth.NakRemoteAccessError),       // 14 error NAK
		a2b(bth.RCSendOnly, 107, 64),             // 15 105 and 106 missing
		bad,                                      // 16 bad ICRC
		a2b(bth.RCSendOnly, 109, 64)[:14+20+8+6], // 17 malformed: a short BTH
		RCFrame(t, HostA, HostB, bth.UDSendOnly, 0x33, 7, 0, 32), // 18 UD, from QP 0x44
		make([]byte, 60), // 19 not RoCE
	}
	want = map[int]viz.Mark{3: viz.MarkLost, 5: viz.MarkNAK, 6: viz.MarkRetrans, 7: viz.MarkRetrans, 10: viz.MarkRNR,
		11: viz.MarkRetrans, 14: viz.MarkNAKError, 15: viz.MarkGap, 16: viz.MarkBad, 17: viz.MarkBad}
	return WriteCapture(t, false, layers.LinkTypeEthernet, frames), want
}
