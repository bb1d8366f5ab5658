package roce

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestPingpongCodec(t *testing.T) {
	e := Endpoint{QPN: 0x11, PSN: 0xabcdef, GID: netip.MustParseAddr("::ffff:198.18.0.1")}
	b := make([]byte, PingpongCodec.Size())
	PingpongCodec.Marshal(b, e)
	const wantMsg = "0000:000011:abcdef:00000000000000000000ffffc6120001\x00"
	if string(b) != wantMsg || len(b) != 52 {
		t.Fatalf("message %q, want %q", b, wantMsg)
	}
	got, err := PingpongCodec.Unmarshal(b)
	if err != nil || got != e {
		t.Fatalf("Unmarshal = %+v, %v", got, err)
	}
	x := Endpoint{LID: 1, QPN: 0xffffff, PSN: 1, GID: e.GID, MTU: MTU4096, RKey: 0x1234ab, Addr: 0xc000123456789, QKey: 0x11111111}
	b = make([]byte, XroceCodec.Size())
	XroceCodec.Marshal(b, x)
	got, err = XroceCodec.Unmarshal(b)
	if err != nil || got != x {
		t.Fatalf("xroce codec: %q → %+v, %v", b, got, err)
	}
	for i := range len(b) - 1 { // the NUL may be missing
		if _, err := XroceCodec.Unmarshal(b[:i:i]); !errors.Is(err, ErrBadMessage) {
			t.Fatalf("truncated to %d: %v", i, err)
		}
	}
	for _, bad := range []string{"0000:00001x:abcdef:00000000000000000000ffffc6120001", "0000-000011:abcdef:00000000000000000000ffffc6120001"} {
		if _, err := PingpongCodec.Unmarshal([]byte(bad)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Both sides connect over an in-memory stream with the pingpong exchange,
// then a SEND goes through.
func TestConnectTCP(t *testing.T) {
	da, db := pipeDevices(t, 1, noFaults, Config{})
	a, b := newSide(t, da, RC, 4096, nil, nil), newSide(t, db, RC, 4096, nil, nil)
	ca, cb := net.Pipe()
	defer ca.Close()
	defer cb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		le, _ := b.qp.LocalEndpoint(0x222, ConnectOptions{})
		_, err := b.qp.ConnectTCP(ctx, cb, false, le, PingpongCodec, ConnectOptions{})
		errc <- err
	}()
	le, _ := a.qp.LocalEndpoint(0x111, ConnectOptions{})
	remote, err := a.qp.ConnectTCP(ctx, ca, true, le, PingpongCodec, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if remote.QPN != b.qp.QPN() || remote.PSN != 0x222 {
		t.Fatalf("remote %+v", remote)
	}
	b.qp.PostRecv(&RecvWR{SGL: []SGE{b.mr.SGE(0, 100)}})
	copy(a.buf, "ping")
	a.qp.PostSend(&SendWR{Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 4)}})
	want(t, a.cq, WCSend, WCSuccess)
	want(t, b.cq, WCRecv, WCSuccess)
	if string(b.buf[:4]) != "ping" {
		t.Fatalf("got %q", b.buf[:4])
	}
	if a, _ := a.qp.Query(); a.State != StateRTS || a.PathMTU != MTU1024 || a.DestQPN != b.qp.QPN() {
		t.Fatalf("attributes %+v", a)
	}
}
