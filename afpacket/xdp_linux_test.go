package afpacket

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/internal/netns"
	"golang.org/x/sys/unix"
)

// TestFilterMatchesXDP checks that the socket filter and the XDP program of
// package bpf pick the same frames: thousands of seeded mutations of the
// header bytes of good RoCE frames go once through the XDP program (with
// BPF_PROG_TEST_RUN) and once over the veth to the AF_PACKET link, and the
// link must deliver exactly the frames the program redirects, in order,
// byte for byte.
func TestFilterMatchesXDP(t *testing.T) {
	prog, err := bpf.Load(bpf.Options{})
	if errors.Is(err, bpf.ErrPermission) || errors.Is(err, bpf.ErrNoBPF) || errors.Is(err, bpf.ErrNoXDP) {
		t.Skipf("no XDP program to compare with: %v", err)
	}
	if err != nil {
		t.Fatalf("bpf.Load: %v", err)
	}
	defer prog.Close()
	xsk, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP socket for the XSKMAP: %v", err)
	}
	defer unix.Close(xsk)
	// With a socket in slot 0 a test run reports XDP_REDIRECT for RoCE
	// frames (see package bpf's tests).
	if err := prog.SetSocket(0, xsk); err != nil {
		t.Fatalf("SetSocket: %v", err)
	}

	n := newTestNet(t, netns.Config{}, Config{})
	r := rand.New(rand.NewPCG(4791, 1))
	interesting := []byte{0x00, 0x06, 0x08, 0x11, 0x12, 0x20, 0x3f, 0x40, 0x45, 0x60, 0x81, 0x86, 0x88, 0xa8, 0xb7, 0xdd, 0xff}
	shapes := []frameSpec{{size: 90}, {ipv6: true, size: 110}, {vlan: true, size: 94}, {vlan: true, ipv6: true, size: 114}}
	bufs := make([][]byte, 128)
	total, matched := 0, 0
	for round := 0; round < 40; round++ {
		k := n.b.Alloc(bufs)
		var want [][]byte
		for i := range bufs[:k] {
			s := shapes[r.IntN(len(shapes))]
			s.seed = byte(r.Uint32())
			f := n.ba.build(bufs[i], s)
			for m := 1 + r.IntN(3); m > 0; m-- {
				pos := 12 + r.IntN(min(len(f), 66)-12) // the header bytes
				if r.IntN(2) == 0 {
					f[pos] = interesting[r.IntN(len(interesting))]
				} else {
					f[pos] = byte(r.Uint32())
				}
			}
			if r.IntN(4) == 0 {
				f = f[:14+r.IntN(len(f)-13)]
			}
			bufs[i] = f
			verdict, err := prog.Run(append([]byte(nil), f...))
			if err != nil {
				t.Fatalf("xdp test run: %v", err)
			}
			if verdict == bpf.XDPRedirect {
				want = append(want, append([]byte(nil), f...))
			}
		}
		if sent, err := n.b.Transmit(bufs[:k]); sent != k || err != nil {
			t.Fatalf("Transmit(%d) = %d, %v", k, sent, err)
		}
		got := receiveN(t, n.a, len(want))
		got = append(got, receiveQuiet(t, n.a, 10*time.Millisecond)...)
		for i := 0; i < max(len(got), len(want)); i++ {
			switch {
			case i >= len(got):
				t.Errorf("round %d: the XDP program takes %x, the socket filter does not", round, want[i])
			case i >= len(want):
				t.Errorf("round %d: the socket filter takes %x, the XDP program does not", round, got[i])
			case !bytes.Equal(got[i], want[i]):
				t.Fatalf("round %d frame %d: the filter and the program differ:\nsocket %x\n   xdp %x", round, i, got[i], want[i])
			}
		}
		total += k
		matched += len(want)
	}
	if matched < total/10 || matched > total*9/10 {
		t.Errorf("%d of %d mutated frames were RoCE: the comparison tests little", matched, total)
	}
	t.Logf("%d frames, %d RoCE by both", total, matched)
}
