package roce

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xroce/xroce/link"
)

// directPipe is a pipe end that lets user calls transmit (as AF_XDP
// sockets do), so that posts run the engine and transmit themselves when
// the worker sleeps: the path that only AF_XDP takes otherwise.
type directPipe struct{ *link.PipeEnd }

func (directPipe) ConcurrentTransmit() bool { return true }

// stressDevices are pipeDevices with the pipe ends optionally wrapped in
// directPipe.
func stressDevices(t *testing.T, f link.Faults, seed uint64, direct bool) (*Device, *Device) {
	t.Helper()
	a, b := link.NewPipe(link.PipeConfig{Seed: seed, AtoB: f, BtoA: f, Buffers: 2048, MACA: macA, MACB: macB})
	var la, lb link.Link = a, b
	if direct {
		la, lb = directPipe{a}, directPipe{b}
	}
	da, err := NewDevice([]link.Link{la}, Config{Addrs: []netip.Addr{ipA}, Neighbors: map[netip.Addr]net.HardwareAddr{ipB: macB}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := NewDevice([]link.Link{lb}, Config{Addrs: []netip.Addr{ipB}, Neighbors: map[netip.Addr]net.HardwareAddr{ipA: macA}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return da, db
}

// ppLoop is xroce pingpong's loop over s: rxDepth receives posted up
// front and topped up when one is left, the client sending first, each
// side sending the next message once its previous send and the peer's
// message have both completed. It polls as pingpong's pollCQ does: a
// few polls with yields, then a wait on the CQ's notification.
func ppLoop(ctx context.Context, s *side, client bool, size, iters, rxDepth int) error {
	const sendID, recvID = 2, 1
	post := func() error {
		return s.qp.PostSend(&SendWR{ID: sendID, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{s.mr.SGE(0, size)}})
	}
	for range rxDepth {
		if err := s.qp.PostRecv(&RecvWR{ID: recvID, SGL: []SGE{s.mr.SGE(0, len(s.buf))}}); err != nil {
			return err
		}
	}
	pending := recvID
	if client {
		if err := post(); err != nil {
			return err
		}
		pending |= sendID
	}
	routs, scnt, rcnt := rxDepth, 0, 0
	var wcs [16]WC
	for rcnt < iters || scnt < iters {
		n := 0
		for range 200 {
			if n = s.cq.Poll(wcs[:]); n > 0 {
				break
			}
			runtime.Gosched()
		}
		for n == 0 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.cq.Wait(wctx)
			cancel()
			if err != nil {
				return fmt.Errorf("stalled after %d sends and %d receives: %w (qp %v, %+v)", scnt, rcnt, err, s.qp.State(), s.qp.Stats())
			}
			n = s.cq.Poll(wcs[:])
		}
		for _, wc := range wcs[:n] {
			if wc.Status != WCSuccess {
				return fmt.Errorf("completion %v %v after %d sends and %d receives", wc.Opcode, wc.Status, scnt, rcnt)
			}
			switch wc.ID {
			case sendID:
				scnt++
			case recvID:
				if int(wc.ByteLen) != size {
					return fmt.Errorf("received %d bytes, want %d", wc.ByteLen, size)
				}
				routs--
				if routs <= 1 {
					for ; routs < rxDepth; routs++ {
						if err := s.qp.PostRecv(&RecvWR{ID: recvID, SGL: []SGE{s.mr.SGE(0, len(s.buf))}}); err != nil {
							return err
						}
					}
				}
				rcnt++
			}
			pending &^= int(wc.ID)
			if scnt < iters && pending == 0 {
				if err := post(); err != nil {
					return err
				}
				pending = recvID | sendID
			}
		}
	}
	return nil
}

// TestPingPongStress ping-pongs 64 KiB SENDs with pingpong's posting
// pattern over links that delay, jitter and duplicate frames (rxe's early
// retransmissions duplicate whole runs of packets), with posts that
// transmit themselves (directPipe) and without: every round trip must
// complete, none may stall for lack of a wakeup or a completion.
func TestPingPongStress(t *testing.T) {
	iters := 200
	if testing.Short() {
		iters = 50
	}
	faults := []struct {
		name string
		f    link.Faults
	}{
		{"clean", link.Faults{}},
		{"delay", link.Faults{Delay: 50 * time.Microsecond}},
		{"duplicate", link.Faults{Duplicate: 0.05, Delay: 20 * time.Microsecond}},
		{"duplicate+loss", link.Faults{Duplicate: 0.05, Loss: 0.002, Reorder: 0.01}},
	}
	for _, direct := range []bool{false, true} {
		for i, c := range faults {
			for seed := range uint64(3) {
				t.Run(fmt.Sprintf("%s/direct=%v/seed=%d", c.name, direct, seed), func(t *testing.T) {
					da, db := stressDevices(t, c.f, uint64(i+1)*100+seed, direct)
					const size = 65536
					a, b := newSide(t, da, RC, size, nil, nil), newSide(t, db, RC, size, nil, nil)
					connect(t, a, b, ConnectOptions{MaxRdAtomic: 1, HopLimit: 1, Timeout: 10})
					ctx := context.Background()
					errs := make(chan error, 2)
					go func() { errs <- ppLoop(ctx, a, true, size, iters, 64) }()
					go func() { errs <- ppLoop(ctx, b, false, size, iters, 64) }()
					for range 2 {
						if err := <-errs; err != nil {
							t.Error(err)
						}
					}
				})
			}
		}
	}
}
