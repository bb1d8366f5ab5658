package roce

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

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
// every frame forwarded.
func TestForwardWakesOncePerBatch(t *testing.T) {
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
	for start := time.Now(); !w1.sleeping.Load(); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("worker 1 did not go to sleep in 10 s")
		}
	}

	// Frames to QP 1 (worker 1), arriving on worker 0's link: Ethernet,
	// IPv4, UDP and the BTH's destination QP; the rest does not matter.
	const nframes = 16
	frames := make([][]byte, nframes)
	for i := range frames {
		f := make([]byte, 64)
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		f[14] = 0x45
		f[14+20+8+7] = 1
		frames[i] = f
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
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		w1.fmu.Lock()
		free := len(w1.ffree)
		w1.fmu.Unlock()
		if free == d.cfg.Forward {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("worker 1 has not taken the forwarded frames in 10 s (%d of %d buffers free)", free, d.cfg.Forward)
		}
	}
}
