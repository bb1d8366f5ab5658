package bpf

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/xroce/xroce/internal/netns"
)

// The loss tests count XDP_DROP verdicts over many frames. A frame is
// dropped independently with probability p, so the count is binomial: its
// mean is N·p and its standard deviation √(N·p·(1−p)). A correct program
// lands outside 5 standard deviations about once in 1.7 million runs; a
// threshold off by a factor of two, or a comparison the wrong way round,
// lands far outside. p = 0 and p = 1 must be exact.

// lossProbs are the loss probabilities the tests set.
var lossProbs = []float64{0, 0.01, 0.10, 0.5, 1}

// checkBinomial reports whether got, the number of drops out of n, is what
// loss probability p allows.
func checkBinomial(t *testing.T, what string, got, n int, p float64) {
	t.Helper()
	switch p {
	case 0, 1:
		if want := int(p) * n; got != want {
			t.Errorf("%s: %d of %d dropped at loss %v, want exactly %d", what, got, n, p, want)
		}
		return
	}
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if d := math.Abs(float64(got) - mean); d > 5*sd {
		t.Errorf("%s: %d of %d dropped at loss %v, want %.0f ± %.0f (5σ); off by %.1fσ",
			what, got, n, p, mean, 5*sd, d/sd)
	}
}

// countersT reads p's counters or ends the test.
func countersT(t *testing.T, p *Program) Counters {
	t.Helper()
	c, err := p.Counters()
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	return c
}

// TestLossVerdicts runs N RoCE frames through the program with a socket in
// slot 0 at each loss probability: every verdict is XDP_DROP or
// XDP_REDIRECT, the drops are binomial, the counters match the verdicts, and
// the frames that are not RoCE all pass.
func TestLossVerdicts(t *testing.T) {
	const n = 20000
	roce := [][]byte{roce4(16), roce6(16), roceVLAN4(16), roceVLAN6(16)}
	var others []verdictCase
	for _, c := range verdictCases() {
		if !c.redirect {
			others = append(others, c)
		}
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := loadT(t, v.opts)
			if err := p.SetSocket(0, xskT(t)); err != nil {
				t.Fatalf("SetSocket: %v", err)
			}
			if got := p.Loss(); got != 0 {
				t.Errorf("Loss() of a fresh program = %v, want 0", got)
			}
			if c := countersT(t, p); c != (Counters{}) {
				t.Errorf("Counters() of a fresh program = %+v, want zero", c)
			}
			for _, prob := range lossProbs {
				if err := p.SetLoss(prob); err != nil {
					t.Fatalf("SetLoss(%v): %v", prob, err)
				}
				if got := p.Loss(); math.Abs(got-prob) > 0x1p-32 {
					t.Errorf("Loss() after SetLoss(%v) = %v", prob, got)
				}
				before := countersT(t, p)
				var drops, redirects int
				for i := 0; i < n; i++ {
					got, err := p.Run(roce[i%len(roce)])
					if err != nil {
						t.Fatalf("Run: %v", err)
					}
					switch got {
					case XDPDrop:
						drops++
					case XDPRedirect:
						redirects++
					default:
						t.Fatalf("loss %v: RoCE frame %d: verdict %s, want XDP_DROP or XDP_REDIRECT",
							prob, i, verdictName(got))
					}
				}
				checkBinomial(t, v.name, drops, n, prob)

				// Not RoCE: passed and not counted, whatever the loss.
				for i := 0; i < 50; i++ {
					for _, c := range others {
						if got, err := p.Run(c.frame); err != nil || got != XDPPass {
							t.Fatalf("loss %v: %s: verdict %s, %v; want XDP_PASS", prob, c.name, verdictName(got), err)
						}
					}
				}

				after := countersT(t, p)
				want := Counters{
					Redirected:    before.Redirected + uint64(redirects),
					InjectedDrops: before.InjectedDrops + uint64(drops),
				}
				if after != want {
					t.Errorf("loss %v: Counters() = %+v after %d redirects and %d drops from %+v, want %+v",
						prob, after, redirects, drops, before, want)
				}
			}
		})
	}
}

// TestLossEmptySlot: with no socket for the queue, an undropped RoCE frame
// gets the XDP_PASS fallback and is not counted as redirected.
func TestLossEmptySlot(t *testing.T) {
	const n, prob = 4000, 0.5
	p := loadT(t, Options{})
	if err := p.SetLoss(prob); err != nil {
		t.Fatalf("SetLoss: %v", err)
	}
	drops := 0
	for i := 0; i < n; i++ {
		got, err := p.Run(roce4(16))
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		switch got {
		case XDPDrop:
			drops++
		case XDPPass:
		default:
			t.Fatalf("RoCE frame %d with empty xskmap: verdict %s, want XDP_DROP or XDP_PASS", i, verdictName(got))
		}
	}
	checkBinomial(t, "empty slot", drops, n, prob)
	if c := countersT(t, p); c != (Counters{InjectedDrops: uint64(drops)}) {
		t.Errorf("Counters() = %+v after %d drops and no redirects", c, drops)
	}
}

func TestSetLossErrors(t *testing.T) {
	p := loadT(t, Options{})
	if err := p.SetLoss(0.25); err != nil {
		t.Fatalf("SetLoss(0.25): %v", err)
	}
	for _, bad := range []float64{-0.01, -1, -math.SmallestNonzeroFloat64, 1 + 0x1p-52, 2,
		math.NaN(), math.Inf(1), math.Inf(-1)} {
		if err := p.SetLoss(bad); err == nil {
			t.Errorf("SetLoss(%v) succeeded", bad)
		}
		if got := p.Loss(); got != 0.25 {
			t.Errorf("Loss() after SetLoss(%v) failed = %v, want 0.25 still", bad, got)
		}
	}
	for _, c := range []struct {
		p, want float64
	}{
		{0, 0},
		{math.Copysign(0, -1), 0},
		{1, 1},
		{math.SmallestNonzeroFloat64, 0},
		{1 - 0x1p-40, 1 - 0x1p-31}, // below 1 stays below 1: threshold 2³²−2
		{0.5, 0.5},
	} {
		if err := p.SetLoss(c.p); err != nil {
			t.Errorf("SetLoss(%v): %v", c.p, err)
		}
		if got := p.Loss(); got != c.want {
			t.Errorf("Loss() after SetLoss(%v) = %v, want %v", c.p, got, c.want)
		}
	}
}

func TestLossThreshold(t *testing.T) {
	for _, c := range []struct {
		p    float64
		want uint32
	}{
		{0, 0},
		{0x1p-34, 0}, // rounds to never
		{0x1p-33, 1}, // half rounds up
		{0x1p-32, 1},
		{0.01, 42949673},
		{0.25, 1 << 30},
		{0.5, 1 << 31},
		{1 - 0x1p-32, lossAlways - 1},
		{1 - 0x1p-34, lossAlways - 1}, // rounds to 2³², which would say "always"
		{1, lossAlways},
	} {
		if got := lossThreshold(c.p); got != c.want {
			t.Errorf("lossThreshold(%v) = %#x, want %#x", c.p, got, c.want)
		}
	}
	if got := binary.Size(counterValues{}); got != countersSize {
		t.Errorf("counterValues is %d bytes, the program's struct counters %d", got, countersSize)
	}
	for _, th := range []uint32{0, 1, 1 << 31, lossAlways - 1, lossAlways} {
		if got := lossThreshold(lossProbability(th)); got != th {
			t.Errorf("lossThreshold(lossProbability(%#x)) = %#x", th, got)
		}
	}
}

// udpListenT opens a UDP socket on h's address and port inside h's
// namespace.
func udpListenT(t *testing.T, h *netns.Host, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := h.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.IP, uint16(port))))
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s:%d: %v", h.IP, port, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLossVeth sets loss on the program attached to A and sends RoCE
// datagrams from a kernel UDP socket on B. The XSKMAP is empty, so each
// datagram the program does not drop gets the XDP_PASS fallback and reaches
// A's UDP socket on port 4791. Datagrams go in batches smaller than veth's
// ring (256), and each batch is complete when the datagrams received plus
// the program's drop counter account for every one sent, so a datagram lost
// anywhere else stalls the test until its deadline.
func TestLossVeth(t *testing.T) {
	const (
		n     = 2000
		batch = 100
		prob  = 0.5
	)
	pair := netns.NewT(t, netns.Config{})
	p := loadT(t, Options{})
	if _, err := attachIn(pair.A, p, ModeDriver); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	roce, other := udpListenT(t, pair.A, RoCEv2Port), udpListenT(t, pair.A, RoCEv2Port+1)
	tx := udpListenT(t, pair.B, 0)
	deadline := time.Now().Add(time.Minute) // only a lost datagram reaches it, not a slow machine

	// send sends count datagrams to port and returns how many arrive on
	// c, waiting until arrivals plus new injected drops cover them all.
	buf := make([]byte, 256)
	send := func(c *net.UDPConn, port, count int) (got int) {
		t.Helper()
		start := countersT(t, p)
		dst := netip.AddrPortFrom(pair.A.IP, uint16(port))
		msg := make([]byte, 64)
		for sent := 0; sent < count; sent += batch {
			for i := sent; i < min(sent+batch, count); i++ {
				msg[0], msg[1] = byte(i>>8), byte(i)
				if _, err := tx.WriteToUDPAddrPort(msg, dst); err != nil {
					t.Fatalf("send to %v: %v", dst, err)
				}
			}
			for {
				drops := int(countersT(t, p).InjectedDrops - start.InjectedDrops)
				if got+drops >= min(sent+batch, count) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("port %d: %d of %d datagrams arrived and %d were dropped by the program; the rest vanished",
						port, got, min(sent+batch, count), drops)
				}
				c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
				if _, _, err := c.ReadFromUDP(buf); err == nil {
					got++
				} else if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("receive on port %d: %v", port, err)
				}
			}
		}
		// Nothing more may come.
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, _, err := c.ReadFromUDP(buf); err == nil {
			t.Errorf("port %d: a datagram arrived that the drop counter says was dropped", port)
		}
		return got
	}

	if err := p.SetLoss(prob); err != nil {
		t.Fatalf("SetLoss: %v", err)
	}
	got := send(roce, RoCEv2Port, n)
	c := countersT(t, p)
	if got+int(c.InjectedDrops) != n || c.Redirected != 0 {
		t.Errorf("loss %v: %d of %d arrived, Counters() = %+v; want the drops to make up the rest, no redirects",
			prob, got, n, c)
	}
	checkBinomial(t, "veth", n-got, n, prob)
	t.Logf("loss %v: %d of %d RoCE datagrams arrived, %d dropped", prob, got, n, c.InjectedDrops)

	if got := send(other, RoCEv2Port+1, 200); got != 200 {
		t.Errorf("loss %v: %d of 200 datagrams to port %d arrived, want all", prob, got, RoCEv2Port+1)
	}

	if err := p.SetLoss(1); err != nil {
		t.Fatalf("SetLoss(1): %v", err)
	}
	if got := send(roce, RoCEv2Port, 200); got != 0 {
		t.Errorf("loss 1: %d of 200 RoCE datagrams arrived, want none", got)
	}
	if err := p.SetLoss(0); err != nil {
		t.Fatalf("SetLoss(0): %v", err)
	}
	if got := send(roce, RoCEv2Port, 200); got != 200 {
		t.Errorf("loss 0: %d of 200 RoCE datagrams arrived, want all", got)
	}
}
