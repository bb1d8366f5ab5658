package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/roce"
)

// rsPair connects an rsocket client (cfg a) to a ListenCM listener (cfg
// b) over a pipe with faults f.
func rsPair(t *testing.T, f link.Faults, seed uint64, ca, cb Config) (*Conn, *Conn) {
	t.Helper()
	ca.Protocol = ProtocolRsocket
	_, _, aa, ab := pipeAgents(t, f, seed)
	l, err := cb.ListenCM(ab, netip.AddrPortFrom(netip.Addr{}, 7471))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	a, err := ca.DialCM(ctx, aa, netip.AddrPortFrom(ipB, 7471))
	if err != nil {
		t.Fatal(err)
	}
	c := <-ch
	if c == nil {
		t.FailNow()
	}
	b := c.(*Conn)
	if b.rs == nil {
		t.Fatal("the listener did not take the rsocket connect data for rsocket's")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestRsocketStream: rsocket streams carry data both ways, one direction
// at a time and both at once, through rings small and large and with the
// peer's SGL updates in either byte order.
func TestRsocketStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ca, cb Config
	}{
		{"8KiB", Config{RingSize: 8 << 10}, Config{RingSize: 8 << 10}},
		{"1MiB-swapped", Config{RingSize: 1 << 20, rsSwapOrder: true}, Config{RingSize: 64 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := rsPair(t, link.Faults{}, 0, tc.ca, tc.cb)
			transfer(t, a, b, 4<<20, 100<<10, 70<<10, 1)
			transfer(t, b, a, 1<<20, 3000, 50, 3)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				transfer(t, a, b, 2<<20, 20<<10, 20<<10, 5)
			}()
			transfer(t, b, a, 2<<20, 30<<10, 10<<10, 6)
			wg.Wait()
			if s := a.Stats(); s.DataMsgs == 0 || s.CreditMsgs == 0 || s.ProtocolErrors != 0 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestRsocketLossy: under 2% loss each way RC recovers and both
// directions at once arrive intact. It runs in a synctest bubble: the
// retransmissions are on fake time.
func TestRsocketLossy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := rsPair(t, link.Faults{Loss: 0.02}, 5, Config{RingSize: 64 << 10, Linger: time.Second},
			Config{RingSize: 64 << 10, Linger: time.Second})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			transfer(t, a, b, 1<<20, 10<<10, 10<<10, 7)
		}()
		transfer(t, b, a, 1<<20, 5<<10, 20<<10, 8)
		wg.Wait()
	})
}

// TestRsocketHalfClose: CloseWrite (SHUTDOWN) gives the peer io.EOF after
// the data and leaves the other direction open; the peer's Close
// (DISCONNECT) then gives io.EOF here.
func TestRsocketHalfClose(t *testing.T) {
	a, b := rsPair(t, link.Faults{}, 0, Config{}, Config{})
	msg := bytes.Repeat([]byte("half-close "), 10000)
	if _, err := a.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after CloseWrite: %v, want net.ErrClosed", err)
	}
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("ReadAll: %d bytes, %v; want %d", len(got), err, len(msg))
	}
	if _, err := b.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(a)
	if err != nil || string(got) != "reply" {
		t.Fatalf("ReadAll after the peer's close: %q, %v", got, err)
	}
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("write after the peer's DISCONNECT succeeded")
	}
}

// TestRsocketCloseDelivers: Close after a large Write delivers every byte
// before the DISCONNECT; the peer reads them, then io.EOF, and its Writes
// fail with ErrReset.
func TestRsocketCloseDelivers(t *testing.T) {
	a, b := rsPair(t, link.Faults{}, 0, Config{RingSize: 64 << 10}, Config{RingSize: 16 << 10})
	msg := make([]byte, 3<<20)
	for i := range msg {
		msg[i] = byte(i * 13)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Write(msg)
		done <- errors.Join(err, a.Close())
	}()
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("ReadAll: %d bytes, %v", len(got), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write([]byte("late")); !errors.Is(err, ErrReset) {
		t.Fatalf("write after the peer's close: %v, want ErrReset", err)
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second close: %v, want net.ErrClosed", err)
	}
}

// TestRsocketDeadlines: Read and Write deadlines, pending calls woken by
// them, and a connection still usable afterwards. It runs in a synctest
// bubble: the calls end at their deadlines exactly.
func TestRsocketDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := rsPair(t, link.Faults{}, 0, Config{RingSize: 8 << 10}, Config{RingSize: 8 << 10})
		start := time.Now()
		a.SetReadDeadline(start.Add(20 * time.Millisecond))
		_, err := a.Read(make([]byte, 10))
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past deadline: %v", err)
		}
		if el := time.Since(start); el != 20*time.Millisecond {
			t.Errorf("read ended after %v, want its deadline, 20ms", el)
		}
		// A Write into a peer that does not read stops when its ring (two
		// halves offered, 8 KiB) is full, at the deadline.
		start = time.Now()
		b.SetWriteDeadline(start.Add(100 * time.Millisecond))
		n, err := b.Write(make([]byte, 64<<10))
		if !errors.Is(err, os.ErrDeadlineExceeded) || n != 8<<10 {
			t.Fatalf("write to a full ring: %d, %v; want 8192, deadline", n, err)
		}
		if el := time.Since(start); el != 100*time.Millisecond {
			t.Errorf("write ended after %v, want its deadline, 100ms", el)
		}
		a.SetReadDeadline(time.Time{})
		b.SetWriteDeadline(time.Time{})
		if _, err := io.ReadFull(a, make([]byte, 8<<10)); err != nil {
			t.Fatal(err)
		}
		transfer(t, b, a, 256<<10, 10<<10, 3<<10, 9)
	})
}

// TestRsocketPeerVanishes: with keepalives, an idle reader whose peer
// vanished (its device closed) fails with ErrReset instead of waiting for
// ever, once the first keepalive's retries are spent. It runs in a
// synctest bubble, on fake time.
func TestRsocketPeerVanishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, db, aa, ab := pipeAgents(t, link.Faults{}, 0)
		l, err := Config{}.ListenCM(ab, netip.AddrPortFrom(netip.Addr{}, 7471))
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan net.Conn, 1)
		go func() {
			// Left open while its device goes away under it; closed at
			// the end, so that no goroutine outlives the bubble.
			c, _ := l.Accept()
			accepted <- c
		}()
		t.Cleanup(func() {
			l.Close()
			if c := <-accepted; c != nil {
				c.Close()
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a, err := Config{Protocol: ProtocolRsocket, Keepalive: 50 * time.Millisecond}.DialCM(ctx, aa, netip.AddrPortFrom(ipB, 7471))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		db.Close()
		a.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		if _, err := a.Read(make([]byte, 10)); !errors.Is(err, ErrReset) {
			t.Fatalf("read from a vanished peer: %v, want ErrReset", err)
		}
		if s := a.Stats(); s.Keepalives == 0 {
			t.Fatalf("no keepalives sent in %v", time.Since(start))
		}
		// The first keepalive goes within 50 ms and fails after its
		// first try and 6 retries of 4.096 µs × 2^14 each.
		retries := 7 * (4096 * time.Nanosecond << 14)
		if el := time.Since(start); el < retries || el > 50*time.Millisecond+retries {
			t.Errorf("ErrReset after %v, want %v to %v", el, retries, 50*time.Millisecond+retries)
		}
	})
}

// TestListenerTakesBoth: one ListenCM listener accepts xroce's protocol
// and rsocket's, each by its connect data.
func TestListenerTakesBoth(t *testing.T) {
	_, _, aa, ab := pipeAgents(t, link.Faults{}, 0)
	l, err := Config{}.ListenCM(ab, netip.AddrPortFrom(netip.Addr{}, 7471))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, p := range []Protocol{ProtocolRsocket, ProtocolXroce, ProtocolRsocket} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a, err := Config{Protocol: p}.DialCM(ctx, aa, netip.AddrPortFrom(ipB, 7471))
		cancel()
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		b := c.(*Conn)
		if (b.rs != nil) != (p == ProtocolRsocket) || (a.rs != nil) != (p == ProtocolRsocket) {
			t.Fatalf("%v: accepted as rsocket %v", p, b.rs != nil)
		}
		transfer(t, a, b, 100<<10, 10<<10, 10<<10, 1)
		a.Close()
		b.Close()
	}
}

// TestRsocketHTTP: a Go net/http server on a ListenCM listener serves an
// HTTP client whose connections are rsocket streams: requests and
// responses (a 1 MiB body among them) cross intact, keep-alive reuses the
// stream.
func TestRsocketHTTP(t *testing.T) {
	_, _, aa, ab := pipeAgents(t, link.Faults{}, 0)
	l, err := Config{}.ListenCM(ab, netip.AddrPortFrom(netip.Addr{}, 80))
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/big" {
			w.Write(body)
			return
		}
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(b))
	})}
	go srv.Serve(l)
	defer srv.Close()
	var dials int
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		dials++
		return Config{Protocol: ProtocolRsocket}.DialCM(ctx, aa, netip.AddrPortFrom(ipB, 80))
	}}, Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	for i, tc := range []struct{ method, path, send, want string }{
		{"GET", "/hello", "", "GET /hello 0"},
		{"POST", "/up", strings.Repeat("x", 300000), "POST /up 300000"},
		{"GET", "/big", "", string(body)},
	} {
		req, _ := http.NewRequest(tc.method, "http://xroce"+tc.path, strings.NewReader(tc.send))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(got) != tc.want {
			t.Fatalf("request %d: %d, %d bytes, %v", i, resp.StatusCode, len(got), err)
		}
	}
	if dials != 1 {
		t.Errorf("%d dials for three requests: keep-alive did not reuse the stream", dials)
	}
}

// TestRsocketKeepalive: keepalives (zero-length RDMA WRITEs with no valid
// address or R_Key) are acknowledged by a live peer: the idle
// connection stays up and carries data afterwards. It runs in a synctest
// bubble, on fake time.
func TestRsocketKeepalive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := rsPair(t, link.Faults{}, 0, Config{Keepalive: 10 * time.Millisecond}, Config{})
		time.Sleep(150 * time.Millisecond)
		// One per 10 ms: 15, or 14 when the sleep ends before the tick due
		// at the same instant.
		if s := a.Stats(); s.Keepalives < 14 || s.Keepalives > 15 {
			t.Fatalf("%d keepalives in 150 ms at 10 ms, want 14 or 15", s.Keepalives)
		}
		transfer(t, a, b, 64<<10, 4<<10, 4<<10, 2)
		transfer(t, b, a, 64<<10, 4<<10, 4<<10, 3)
	})
}

// TestRsocketPeerDREQAnswered: the peer stops its QP and disconnects
// (rdma_disconnect: the QP to ERR, then the DREQ) while a message of ours
// is unacknowledged. The connection answers the DREQ at once, which
// stops its QP as well: the peer's disconnect completes without waiting
// for our Close, and our Close finds the send flushed rather than
// waiting out Linger for an acknowledgement that cannot come.
func TestRsocketPeerDREQAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := rsPair(t, link.Faults{}, 0, Config{Linger: time.Minute}, Config{})
		if err := b.qp.Modify(&roce.Attr{State: roce.StateErr}, roce.AttrState); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write([]byte("never acknowledged")); err != nil {
			t.Fatal(err)
		}
		peerDisconnectAnswered(t, b)
		if err := a.Close(); err != nil {
			t.Fatalf("Close after the peer's DREQ: %v", err)
		}
	})
}
