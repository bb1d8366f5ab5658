package mad

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
)

// The rxe capture of an rping connection (REQ, REP, RTU, DREQ, DREP), copied
// from ../shared/pcaps.
const rxeCapture = "testdata/09_rping_rdmacm.pcap"

// hwCaptures names the ConnectX captures that hold CM exchanges; they stay
// in ../shared/pcaps-hw next to the repository and are never copied into it.
var hwCaptures = []string{"write.pcap", "read2.pcap", "send.pcap", "nvme-discover.pcap", "nvme-discover2.pcap"}

// hwDir returns ../shared/pcaps-hw relative to the repository root, or
// skips the test when it is absent.
func hwDir(t testing.TB) string {
	t.Helper()
	dir, err := findHWDir()
	if err != nil {
		t.Skipf("hardware captures (kept outside the repository) not found: %v", err)
	}
	return dir
}

// findHWDir looks for ../shared/pcaps-hw next to the directory holding
// go.mod.
func findHWDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the test directory")
		}
		dir = up
	}
	hw := filepath.Join(dir, "..", "shared", "pcaps-hw")
	if _, err := os.Stat(filepath.Join(hw, hwCaptures[0])); err != nil {
		return "", err
	}
	return hw, nil
}

// readPcap returns the frames of a pcap file.
func readPcap(t testing.TB, path string) [][]byte {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var frames [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		frames = append(frames, data)
	}
}

// gsiMAD returns the MAD carried by a RoCE v2 frame when the frame is a UD
// SEND_ONLY to QP 1 with the GSI Q_Key (Ethernet, optional 802.1Q tag,
// IPv4 without options or IPv6, UDP 4791, BTH, DETH), the bytes from the
// MAD to the end of the frame, and whether the IP header is IPv4. It reads
// the headers by their fixed offsets, independently of package bth.
func gsiMAD(frame []byte) (m []byte, ipv4, ok bool) {
	if len(frame) < 14 {
		return nil, false, false
	}
	off, et := 14, binary.BigEndian.Uint16(frame[12:])
	if et == 0x8100 && len(frame) >= 18 {
		off, et = 18, binary.BigEndian.Uint16(frame[16:])
	}
	switch {
	case et == 0x0800 && len(frame) >= off+20 && frame[off] == 0x45 && frame[off+9] == 17:
		off, ipv4 = off+20, true
	case et == 0x86dd && len(frame) >= off+40 && frame[off+6] == 17:
		off += 40
	default:
		return nil, false, false
	}
	const udp, bthLen, deth = 8, 12, 8
	if len(frame) < off+udp+bthLen+deth || binary.BigEndian.Uint16(frame[off+2:]) != 4791 {
		return nil, false, false
	}
	b := frame[off+udp:]
	if b[0] != 0x64 || uint24(b[5:]) != 1 || binary.BigEndian.Uint32(b[bthLen:]) != GSIQKey {
		return nil, false, false
	}
	return b[bthLen+deth:], ipv4, true
}

// capturedMAD is one CM MAD found in a capture.
type capturedMAD struct {
	file  string
	frame int // 1-based, as tshark counts
	ipv4  bool
	m     MAD
}

// capturedMADs returns the MADs of every GSI frame of a capture.
func capturedMADs(t testing.TB, path string) []capturedMAD {
	t.Helper()
	var out []capturedMAD
	for i, f := range readPcap(t, path) {
		b, ipv4, ok := gsiMAD(f)
		if !ok {
			continue
		}
		m, err := Parse(b)
		if err != nil {
			t.Fatalf("%s #%d: %v", path, i+1, err)
		}
		out = append(out, capturedMAD{file: filepath.Base(path), frame: i + 1, ipv4: ipv4, m: m})
	}
	if len(out) == 0 {
		t.Fatalf("%s: no MAD to QP 1", path)
	}
	return out
}

// allCaptured returns the MADs of the rxe capture and, when present, of the
// hardware captures.
func allCaptured(t testing.TB) []capturedMAD {
	t.Helper()
	all := capturedMADs(t, rxeCapture)
	if dir, err := findHWDir(); err == nil {
		for _, name := range hwCaptures {
			all = append(all, capturedMADs(t, filepath.Join(dir, name))...)
		}
	}
	return all
}
