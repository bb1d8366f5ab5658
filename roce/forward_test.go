package roce

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/link"
)

// heldLink is a link whose Wakeups are counted and held back while hold
// is set, so that its worker stays asleep (and marked sleeping) while the
// test looks at how often it was woken.
type heldLink struct {
	link.Link
	hold    atomic.Bool
	wakeups atomic.Int64
}

func (l *heldLink) Wakeup() {
	if l.hold.Load() {
		l.wakeups.Add(1)
		return
	}
	l.Link.Wakeup()
}

// A batch of frames for another worker's QP wakes that worker once, not
// once per frame: over AF_XDP each wakeup of a sleeping worker is an
// eventfd write, and a stream whose peers sit on different workers has
// every frame forwarded. It runs in a synctest bubble, where
// synctest.Wait lets the workers settle before each look.
func TestForwardWakesOncePerBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l0, _ := link.NewPipe(link.PipeConfig{Buffers: 256, MACA: macA, MACB: macB})
		p1, _ := link.NewPipe(link.PipeConfig{Buffers: 256, MACA: macA, MACB: macB})
		l1 := &heldLink{Link: p1}
		l1.hold.Store(true)
		d, err := NewDevice([]link.Link{l0, l1}, Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			l1.hold.Store(false)
			d.Close()
		})
		w0, w1 := d.workers[0], d.workers[1]
		synctest.Wait()
		if !w1.sleeping.Load() {
			t.Fatal("worker 1 is not asleep once the device settled")
		}

		// Frames to QP 1 (worker 1), arriving on worker 0's link.
		const nframes = 16
		frames := make([][]byte, nframes)
		for i := range frames {
			frames[i] = frameTo(t, 1, false)
		}
		w0.mu.Lock()
		w0.input(frames, d.now())
		w0.mu.Unlock()

		if n := l1.wakeups.Load(); n != 1 {
			t.Errorf("worker 1 woken %d times for a batch of %d frames, want 1", n, nframes)
		}
		if n := w1.forwarded.Load(); n != nframes {
			t.Errorf("%d frames forwarded, want %d", n, nframes)
		}
		// Let worker 1 run: it takes the frames (and drops them: there is no
		// QP 1) and gives their buffers back.
		l1.hold.Store(false)
		w1.link.Wakeup()
		synctest.Wait()
		w1.fmu.Lock()
		free := len(w1.ffree)
		w1.fmu.Unlock()
		if free != d.cfg.Forward {
			t.Fatalf("worker 1 has not taken the forwarded frames (%d of %d buffers free)", free, d.cfg.Forward)
		}
	})
}

// frameTo builds a RoCE v2 SEND Only frame to QP qpn (IPv4 or IPv6).
func frameTo(t *testing.T, qpn uint32, v6 bool) []byte {
	t.Helper()
	ff := bth.FrameFields{SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2")}
	if v6 {
		ff.SrcIP, ff.DstIP = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
	}
	ff.BTH.Opcode = bth.RCSendOnly
	ff.BTH.DestQP = qpn
	buf := make([]byte, 256)
	n, err := bth.BuildInPlace(buf, &ff, 0)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// input routes each frame by its destination QP (decoded once, IPv4 and
// IPv6 alike): its own to its engine, the others to their workers; what
// does not decode, truncated at any length, is counted by its engine as
// malformed and goes nowhere else.
func TestInputRoutesDecodedFrames(t *testing.T) {
	l0, _ := link.NewPipe(link.PipeConfig{Buffers: 256, MACA: macA, MACB: macB})
	l1, _ := link.NewPipe(link.PipeConfig{Buffers: 256, MACA: macA, MACB: macB})
	d, err := NewDevice([]link.Link{l0, l1}, Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}, noGoroutines: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	w0, w1 := d.workers[0], d.workers[1]
	var frames [][]byte
	for _, v6 := range []bool{false, true} {
		frames = append(frames, frameTo(t, 0xabcdef, v6), frameTo(t, 0xabcdee, v6)) // worker 1, worker 0
	}
	good := frameTo(t, 0xabcdef, false)
	for i := range len(good) {
		frames = append(frames, good[:i:i])
	}
	st := w0.eng.Stats()
	frames0, malformed0 := st.RxFrames.Load(), st.RxMalformed.Load()
	w0.mu.Lock()
	w0.input(frames, d.now())
	w0.mu.Unlock()
	if n := w1.forwarded.Load(); n != 2 {
		t.Errorf("%d frames forwarded to worker 1, want 2", n)
	}
	if got := st.RxFrames.Load() - frames0; got != uint64(2+len(good)) {
		t.Errorf("worker 0's engine saw %d frames, want %d (its 2 and %d truncated)", got, 2+len(good), len(good))
	}
	if got := st.RxMalformed.Load() - malformed0; got != uint64(len(good)) {
		t.Errorf("worker 0's engine counted %d malformed, want %d", got, len(good))
	}
}
