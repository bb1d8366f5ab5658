package qp

import (
	"testing"

	"github.com/xroce/xroce/bth"
)

// postWrites posts n WRITEs of 100 packets each (MTU 1024).
func postWrites(t *testing.T, q *QP, n int) {
	t.Helper()
	for range n {
		if err := q.PostSend(&SendWR{Opcode: WRRDMAWrite, SGL: sge(localBase, 100<<10), RemoteAddr: 0, RKey: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

func checkRun(t *testing.T, what string, got []bth.Frame, first bth.PSN, n int) {
	t.Helper()
	if len(got) != n || n > 0 && (got[0].BTH.PSN() != first || got[n-1].BTH.PSN() != first.Add(uint32(n-1))) {
		var from bth.PSN
		if len(got) > 0 {
			from = got[0].BTH.PSN()
		}
		t.Fatalf("%s: sent %d packets from PSN %d, want %d from %d", what, len(got), from, n, first)
	}
}

// A QP that has seen no loss keeps maxWindow PSNs in flight; a PSN
// sequence NAK halves the window, once for all the NAKs of one window;
// acknowledged PSNs widen it again, one PSN per windowGrowth.
func TestWindowAdaptsToLoss(t *testing.T) {
	v, q := lone(t, nil)
	postWrites(t, q, 8) // 800 packets from PSN 9
	checkRun(t, "nothing acknowledged", v.poll(0), 9, maxWindow)

	// The responder saw a gap at 109: 100 PSNs acknowledged (the window
	// is full already), then the cut, and the resend from 109 fills
	// the halved window.
	got := v.input(forge(t, ack(109, bth.NakPSNSeqError), nil))
	checkRun(t, "after a PSN sequence NAK", got, 109, maxWindow/2)
	if q.win != maxWindow/2 || q.stats.WindowCuts.Load() != 1 || v.e.stats.WindowCuts.Load() != 1 {
		t.Fatalf("window %d, %d cuts (engine %d), want %d and 1", q.win, q.stats.WindowCuts.Load(), v.e.stats.WindowCuts.Load(), maxWindow/2)
	}

	// Another gap among the packets sent before the cut is the same
	// loss episode: no second cut. 20 more PSNs acknowledged widen the
	// window by 20/windowGrowth.
	got = v.input(forge(t, ack(129, bth.NakPSNSeqError), nil))
	win := maxWindow/2 + 20/windowGrowth
	checkRun(t, "after a NAK of the same episode", got, 129, win)
	if q.win != win || q.stats.WindowCuts.Load() != 1 {
		t.Fatalf("window %d, %d cuts, want %d and 1", q.win, q.stats.WindowCuts.Load(), win)
	}

	// ACKs widen it on: 200 more PSNs acknowledged (4 left over from
	// the 20).
	got = v.input(forge(t, ack(328, bth.SyndromeACKNoCredits), nil))
	win += (200 + 20%windowGrowth) / windowGrowth
	if q.win != win {
		t.Fatalf("window %d after 200 more PSNs acknowledged, want %d", q.win, win)
	}
	checkRun(t, "after the ACK", got, 129+bth.PSN(maxWindow/2+20/windowGrowth), 329+win-(129+maxWindow/2+20/windowGrowth))

	// A NAK past the PSNs sent before the cut is a new loss: cut again.
	psn := q.cutPSN.Add(1)
	v.input(forge(t, ack(psn, bth.NakPSNSeqError), nil))
	if q.stats.WindowCuts.Load() != 2 {
		t.Fatalf("a NAK at %d (cut at %d) did not cut the window: %d cuts", psn, q.cutPSN, q.stats.WindowCuts.Load())
	}
}

// An ACK timeout halves the window once, however often it expires
// before progress; the window never shrinks below minWindow and never
// grows above maxWindow.
func TestWindowTimeoutAndBounds(t *testing.T) {
	v, q := lone(t, nil)
	postWrites(t, q, 6)
	checkRun(t, "nothing acknowledged", v.poll(0), 9, maxWindow)
	to := q.ackTimeout()
	checkRun(t, "after the first timeout", v.poll(to+1), 9, recoveryWindow)
	checkRun(t, "after the second timeout", v.poll(2*to+2), 9, recoveryWindow)
	if q.win != maxWindow/2 || q.stats.WindowCuts.Load() != 1 {
		t.Fatalf("after two timeouts: window %d, %d cuts, want %d and 1", q.win, q.stats.WindowCuts.Load(), maxWindow/2)
	}

	for range 20 {
		q.compPSN = q.sentPSN
		q.cutWindow(q.compPSN)
	}
	if q.win != minWindow {
		t.Fatalf("window %d after 20 more losses, want the floor %d", q.win, minWindow)
	}
	q.compPSN = q.compPSN.Add(1 << 20)
	q.widenWindow()
	if q.win != maxWindow {
		t.Fatalf("window %d after 2^20 PSNs acknowledged, want the ceiling %d", q.win, maxWindow)
	}
}

// A CNP halves the window down to congestedWindow and no further; a
// window narrowed by losses below that is left alone.
func TestWindowNarrowsOnCNP(t *testing.T) {
	p := newMemPair(t, MTU1024)
	a := p.q[0]
	ff := bth.FrameFields{SrcMAC: simMACs[1], DstMAC: simMACs[0], SrcIP: ipB, DstIP: ipA, TTL: 64, TOS: 0xc2,
		SrcPort: 0xf000, BTH: bth.CNPFields(0xffff, a.QPN())}
	buf := make([]byte, 128)
	n, err := bth.Build(buf, &ff, nil)
	if err != nil {
		t.Fatal(err)
	}
	cnp := buf[:n]
	for _, want := range []int{maxWindow / 2, congestedWindow, congestedWindow} {
		p.e[0].Input([][]byte{cnp}, 0)
		if a.win != want {
			t.Fatalf("window %d after a CNP, want %d", a.win, want)
		}
	}
	a.win = minWindow
	p.e[0].Input([][]byte{cnp}, 0)
	if a.win != minWindow {
		t.Fatalf("a CNP changed a window of %d to %d", minWindow, a.win)
	}
	if a.Stats().RxCNP.Load() != 4 {
		t.Fatalf("%d CNPs counted, want 4", a.Stats().RxCNP.Load())
	}
}
