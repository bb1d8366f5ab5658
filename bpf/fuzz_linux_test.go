package bpf

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// isRoCE is the rule the program implements, written plainly in Go as an
// oracle: Ethernet, at most one 802.1Q tag, IPv4 with IHL 5 and neither MF
// nor a fragment offset or IPv6 with next header UDP, the whole UDP header
// present, destination port 4791.
func isRoCE(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	off, et := 14, binary.BigEndian.Uint16(f[12:])
	if et == 0x8100 {
		if len(f) < 18 {
			return false
		}
		off, et = 18, binary.BigEndian.Uint16(f[16:])
	}
	var udp int
	switch et {
	case 0x0800:
		if len(f) < off+28 || f[off] != 0x45 || binary.BigEndian.Uint16(f[off+6:])&0x3fff != 0 || f[off+9] != 17 {
			return false
		}
		udp = off + 20
	case 0x86dd:
		if len(f) < off+48 || f[off]>>4 != 6 || f[off+6] != 17 {
			return false
		}
		udp = off + 40
	default:
		return false
	}
	return binary.BigEndian.Uint16(f[udp+2:]) == RoCEv2Port
}

// checkOracle runs frame through p (slot 0 holding a socket) and compares
// the verdict with isRoCE.
func checkOracle(t *testing.T, p *Program, frame []byte) {
	t.Helper()
	checkOracleVerdict(t, p, frame, XDPRedirect)
}

// checkOracleVerdict is checkOracle with the verdict RoCE frames must get.
func checkOracleVerdict(t *testing.T, p *Program, frame []byte, roce uint32) {
	t.Helper()
	got, err := p.Run(frame)
	if err != nil {
		t.Fatalf("Run(%x): %v", frame, err)
	}
	want := uint32(XDPPass)
	if isRoCE(frame) {
		want = roce
	}
	if got != want {
		t.Errorf("frame %x: verdict %s, oracle says %s", frame, verdictName(got), verdictName(want))
	}
}

// headerMutations returns copies of frame with header bytes changed: the
// seeded random walk visits the fields the program reads far more often
// than uniform fuzzing would.
func headerMutations(frame []byte, n int, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0x0c0ffee))
	interesting := []byte{0x00, 0x01, 0x06, 0x08, 0x11, 0x12, 0x1f, 0x20, 0x3f, 0x40, 0x45, 0x46, 0x60, 0x65,
		0x81, 0x86, 0x88, 0xa8, 0xb7, 0xdd, 0xff}
	var out [][]byte
	for i := 0; i < n; i++ {
		f := append([]byte(nil), frame...)
		for m := 1 + r.IntN(3); m > 0; m-- {
			pos := 12 + r.IntN(min(len(f), 80)-12)
			if r.IntN(2) == 0 {
				f[pos] = interesting[r.IntN(len(interesting))]
			} else {
				f[pos] = byte(r.Uint32())
			}
		}
		if r.IntN(4) == 0 {
			f = f[:14+r.IntN(len(f)-13)]
		}
		out = append(out, f)
	}
	return out
}

// TestOracle compares the program with isRoCE on thousands of seeded
// mutations of good frames, for both variants.
func TestOracle(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := loadT(t, v.opts)
			if err := p.SetSocket(0, xskT(t)); err != nil {
				t.Fatalf("SetSocket: %v", err)
			}
			redirects := 0
			for i, good := range [][]byte{roce4(16), roce6(16), roceVLAN4(16), roceVLAN6(16)} {
				for _, f := range headerMutations(good, 2000, uint64(i)) {
					checkOracle(t, p, f)
					if isRoCE(f) {
						redirects++
					}
				}
			}
			if redirects < 500 {
				t.Errorf("only %d mutated frames were RoCE: the mutations test little", redirects)
			}
		})
	}
}

// TestOracleLoss runs the same mutations with loss 1: exactly the frames
// isRoCE accepts are dropped, everything else passes.
func TestOracleLoss(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := loadT(t, v.opts)
			if err := p.SetSocket(0, xskT(t)); err != nil {
				t.Fatalf("SetSocket: %v", err)
			}
			if err := p.SetLoss(1); err != nil {
				t.Fatalf("SetLoss: %v", err)
			}
			drops := 0
			for i, good := range [][]byte{roce4(16), roce6(16), roceVLAN4(16), roceVLAN6(16)} {
				for _, f := range headerMutations(good, 2000, uint64(i)) {
					checkOracleVerdict(t, p, f, XDPDrop)
					if isRoCE(f) {
						drops++
					}
				}
			}
			if c := countersT(t, p); c != (Counters{InjectedDrops: uint64(drops)}) {
				t.Errorf("Counters() = %+v after %d drops and no redirects", c, drops)
			}
		})
	}
}

// FuzzVerdict checks the program against isRoCE on any frame. Run it with
// go test -run '^$' -fuzz FuzzVerdict -fuzztime 20s ./bpf/
func FuzzVerdict(f *testing.F) {
	for _, seed := range [][]byte{roce4(0), roce6(0), roceVLAN4(0), roceVLAN6(0), appendEth(nil, ethARP)} {
		f.Add(seed)
	}
	p := loadT(f, Options{})
	if err := p.SetSocket(0, xskT(f)); err != nil {
		f.Fatalf("SetSocket: %v", err)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 3000 {
			return // BPF_PROG_TEST_RUN refuses these without frags
		}
		checkOracle(t, p, frame)
	})
}
