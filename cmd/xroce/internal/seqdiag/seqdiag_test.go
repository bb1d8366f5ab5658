package seqdiag

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
)

// TestDrawFirstNAK draws the first NAK of frames kept by the lab's loss
// phase in each arrangement the trace can hold: the lost request right
// before the NAK and sent again right after it (which sliced past the
// NAK and panicked), far from it, not kept, and never sent again.
func TestDrawFirstNAK(t *testing.T) {
	seq := bth.NakPSNSeqError
	req := func(psn bth.PSN) []byte {
		return clitest.RCFrame(t, clitest.HostA, clitest.HostB, bth.RCSendOnly, 0x22, psn, 0, 64)
	}
	nak := func(psn bth.PSN) []byte {
		return clitest.RCFrame(t, clitest.HostB, clitest.HostA, bth.RCAck, 0x11, psn, seq, 0)
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		lost   bool // the lost request is among the frames, marked X
	}{
		{"lost-then-nak-then-again", [][]byte{req(100), req(101), nak(101), req(101), req(102)}, true},
		{"lost-first-nak-again", [][]byte{req(101), nak(101), req(101)}, true},
		{"lost-far-back", [][]byte{req(99), req(100), req(101), req(102), req(103), req(104), req(105), req(106),
			req(107), nak(101), req(108), req(101), req(102)}, true},
		{"lost-not-kept", [][]byte{req(102), req(103), nak(101), req(101)}, false},
		{"never-again", [][]byte{req(100), req(101), nak(101)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kept []Frame
			t0 := time.Unix(0, 0)
			for i, f := range tc.frames {
				kept = append(kept, Frame{Time: t0.Add(time.Duration(i) * time.Millisecond), Data: f})
			}
			var out bytes.Buffer
			DrawFirstNAK(&out, clitest.HostA, clitest.HostB, kept)
			s := out.String()
			if !strings.Contains(s, "B saw PSN 101 missing") || !strings.Contains(s, "NAK PSN sequence error") {
				t.Fatalf("no first NAK drawn:\n%s", s)
			}
			if got := strings.Contains(s, "X  |"); got != tc.lost {
				t.Errorf("lost request marked %v, want %v:\n%s", got, tc.lost, s)
			}
		})
	}
}
