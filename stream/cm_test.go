package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/roce"
)

// pipeAgents returns two devices joined by a pipe with faults and a CM
// agent on each, closed when the test ends.
func pipeAgents(t *testing.T, f link.Faults, seed uint64) (da, db *roce.Device, aa, ab *cm.Agent) {
	t.Helper()
	da, db = pipeDevices(t, f, seed)
	var err error
	if aa, err = cm.Open(da, cm.AgentConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { aa.Close() })
	if ab, err = cm.Open(db, cm.AgentConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ab.Close() })
	return da, db, aa, ab
}

// cmPair connects two Conns over RDMA CM (no side channel).
func cmPair(t *testing.T, f link.Faults, seed uint64, cfg Config) (*Conn, *Conn, *Listener) {
	t.Helper()
	_, _, aa, ab := pipeAgents(t, f, seed)
	l, err := cfg.ListenCM(ab, netip.AddrPortFrom(netip.Addr{}, 7471))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	a, err := cfg.DialCM(ctx, aa, netip.AddrPortFrom(ipB, 7471))
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c.(*Conn), l
}

// TestCMStream: streams set up over RDMA CM carry data both ways, and
// Close on one end reaches the other.
func TestCMStream(t *testing.T) {
	for _, ring := range []int{4 << 10, 1 << 20} {
		t.Run(fmt.Sprint(ring), func(t *testing.T) {
			a, b, l := cmPair(t, link.Faults{}, 0, Config{RingSize: ring})
			if got := l.Addr().(Addr); got.Port != 7471 {
				t.Fatalf("listener address %v", got)
			}
			if a.RemoteAddr().(Addr).IP != ipB || b.RemoteAddr().(Addr).IP != ipA || a.RemoteAddr().(Addr).QPN != b.qp.QPN() {
				t.Fatalf("addresses %v → %v, %v → %v", a.LocalAddr(), a.RemoteAddr(), b.LocalAddr(), b.RemoteAddr())
			}
			transfer(t, a, b, 4<<20, 100<<10, 70<<10, 1)
			transfer(t, b, a, 1<<20, 3000, 50, 3)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 10)
			if n, err := b.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
				t.Fatalf("read after the peer's close: %d, %v", n, err)
			}
		})
	}
}

// TestCMStreamLossy: under loss the CM retries and the stream recovers.
// It runs in a synctest bubble: the retries are on fake time.
func TestCMStreamLossy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := cmPair(t, link.Faults{Loss: 0.05}, 3, Config{RingSize: 64 << 10, Linger: time.Second})
		transfer(t, a, b, 1<<20, 10<<10, 10<<10, 7)
	})
}

// TestCMStreamPeerDREQAnswered: a stream over RDMA CM answers the peer's
// DREQ when it comes (the peer sends it once it let go), not when this
// side closes.
func TestCMStreamPeerDREQAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := cmPair(t, link.Faults{}, 0, Config{Linger: time.Second})
		peerDisconnectAnswered(t, b)
		if st := a.qp.State(); st != roce.StateErr {
			t.Fatalf("QP in %v after answering the DREQ, want ERR", st)
		}
	})
}

// peerDisconnectAnswered makes b's peer disconnect (its CM's DREQ) and
// wants b's side to answer before anything closes it, once the bubble
// is idle (call it inside synctest).
func peerDisconnectAnswered(t *testing.T, b *Conn) {
	t.Helper()
	answered := make(chan error, 1)
	go func() { answered <- b.cmc.Disconnect(context.Background()) }()
	synctest.Wait()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("the peer's DREQ not answered before our Close")
	}
}
