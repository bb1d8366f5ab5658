package pingpong

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

// A message as ibv_rc_pingpong on rxe sends it (GID index 1, 198.18.1.2).
const rxeMessage = "0000:000011:c4a7f3:00000000000000000000ffffc6120102\x00"

var rxeDest = Dest{QPN: 0x11, PSN: 0xc4a7f3, GID: netip.MustParseAddr("::ffff:198.18.1.2")}

func TestParseMessage(t *testing.T) {
	d, err := ParseMessage([]byte(rxeMessage))
	if err != nil {
		t.Fatalf("ParseMessage: %v", err)
	}
	if d != rxeDest {
		t.Errorf("ParseMessage = %+v, want %+v", d, rxeDest)
	}
	if got, want := d.String(), "LID 0x0000, QPN 0x000011, PSN 0xc4a7f3, GID ::ffff:198.18.1.2"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestMessage(t *testing.T) {
	m := rxeDest.Message()
	if got := string(m[:]); got != rxeMessage {
		t.Errorf("Message() = %q, want %q", got, rxeMessage)
	}
}

func TestParseMessageRejects(t *testing.T) {
	for n := 0; n < MessageSize-1; n++ {
		if _, err := ParseMessage([]byte(rxeMessage[:n])); !errors.Is(err, ErrMessage) {
			t.Errorf("ParseMessage(%d-byte prefix) error = %v, want ErrMessage", n, err)
		}
	}
	for name, m := range map[string]string{
		"separator": "0000-000011:c4a7f3:00000000000000000000ffffc6120102",
		"qpn":       "0000:00001x:c4a7f3:00000000000000000000ffffc6120102",
		"gid":       "0000:000011:c4a7f3:0000000000000000000zffffc6120102",
	} {
		if _, err := ParseMessage([]byte(m)); !errors.Is(err, ErrMessage) {
			t.Errorf("ParseMessage(%s) error = %v, want ErrMessage", name, err)
		}
	}
}

func TestExchange(t *testing.T) {
	client := Dest{QPN: 0x123, PSN: 0x456789, GID: netip.MustParseAddr("::ffff:198.18.1.1")}
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	type res struct {
		d   Dest
		err error
	}
	srv := make(chan res, 1)
	go func() {
		var readyCalled bool
		d, err := ServerExchange(s, rxeDest, func(remote Dest) error {
			readyCalled = remote == client
			return nil
		})
		if err == nil && !readyCalled {
			err = errors.New("ready not called with the client's address")
		}
		srv <- res{d, err}
	}()
	got, err := ClientExchange(c, client)
	if err != nil {
		t.Fatalf("ClientExchange: %v", err)
	}
	if got != rxeDest {
		t.Errorf("client got %+v, want %+v", got, rxeDest)
	}
	r := <-srv
	if r.err != nil {
		t.Fatalf("ServerExchange: %v", r.err)
	}
	if r.d != client {
		t.Errorf("server got %+v, want %+v", r.d, client)
	}
}
