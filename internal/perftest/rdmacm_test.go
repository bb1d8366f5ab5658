package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestPingpongDest: struct pingpong_dest as perftest -R sends it, field by
// field: 56 bytes, big-endian integers, 4 bytes of padding at 20, the GID
// raw at 32.
func TestPingpongDest(t *testing.T) {
	d := Dest{LID: 0x0102, OutReads: 0x0304, QPN: 0x050607, PSN: 0x08090a, RKey: 0x0b0c0d0e,
		VAddr: 0x0f10111213141516, GID: netip.MustParseAddr("::ffff:198.18.0.1").As16(), SRQN: 0x1718191a,
		GIDIndex: 3}
	b := bytes.Repeat([]byte{0xee}, 64)
	d.PutPingpongDest(b)
	if PingpongDestSize != 56 {
		t.Fatalf("PingpongDestSize = %d, want 56", PingpongDestSize)
	}
	for _, f := range []struct {
		name string
		off  int
		want []byte
	}{
		{"lid", 0, []byte{0, 0, 0x01, 0x02}},
		{"out_reads", 4, []byte{0, 0, 0x03, 0x04}},
		{"qpn", 8, []byte{0, 0x05, 0x06, 0x07}},
		{"psn", 12, []byte{0, 0x08, 0x09, 0x0a}},
		{"rkey", 16, []byte{0x0b, 0x0c, 0x0d, 0x0e}},
		{"padding", 20, []byte{0, 0, 0, 0}},
		{"vaddr", 24, []byte{0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16}},
		{"gid", 32, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1}},
		{"srqn", 48, []byte{0x17, 0x18, 0x19, 0x1a}},
		{"gid_index", 52, []byte{0, 0, 0, 3}},
	} {
		if got := b[f.off : f.off+len(f.want)]; !bytes.Equal(got, f.want) {
			t.Errorf("%s at %d = % x, want % x", f.name, f.off, got, f.want)
		}
	}
	if !bytes.Equal(b[56:], bytes.Repeat([]byte{0xee}, 8)) {
		t.Errorf("PutPingpongDest wrote past 56 bytes: % x", b[56:])
	}
	got, err := ParsePingpongDest(b[:56])
	if err != nil || got != d {
		t.Fatalf("ParsePingpongDest = %+v, %v; want %+v", got, err, d)
	}
	// What perftest's rdma_write_keys sends for a dest it has not filled
	// yet (the syncs around the data connections): zeros but the pad.
	z := make([]byte, 56)
	copy(z[20:], []byte{0xde, 0xad, 0xbe, 0xef})
	if got, err := ParsePingpongDest(z); err != nil || got != (Dest{}) {
		t.Fatalf("ParsePingpongDest(zeros, junk padding) = %+v, %v; want the zero Dest", got, err)
	}
}

func TestPingpongDestBad(t *testing.T) {
	var good [PingpongDestSize]byte
	testDest.PutPingpongDest(good[:])
	for n := range PingpongDestSize {
		if _, err := ParsePingpongDest(good[:n]); !errors.Is(err, ErrBadMessage) {
			t.Errorf("ParsePingpongDest of %d bytes: %v, want ErrBadMessage", n, err)
		}
	}
	for _, c := range []struct {
		off int
		v   uint32
	}{{pdLID, 0x10000}, {pdOutReads, 0xffffffff}, {pdQPN, 0x1000000}, {pdPSN, 0x1000000}} {
		b := good
		binary.BigEndian.PutUint32(b[c.off:], c.v)
		if _, err := ParsePingpongDest(b[:]); !errors.Is(err, ErrBadMessage) {
			t.Errorf("field at %d = %#x: %v, want ErrBadMessage", c.off, c.v, err)
		}
	}
}

// msgPipe is one direction of a message transport: each Send is one
// message, as a SEND on the control QP.
type msgPipe chan []byte

// msgEnd is one end of a pair of msgPipes.
type msgEnd struct {
	in, out msgPipe
	sent    *[][]byte // every message this end sent
}

func (e msgEnd) Send(b []byte) error {
	m := append([]byte(nil), b...)
	*e.sent = append(*e.sent, m)
	select {
	case e.out <- m:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("send: nobody receives")
	}
}

func (e msgEnd) Recv(b []byte) error {
	select {
	case m := <-e.in:
		if len(m) < len(b) {
			return fmt.Errorf("message of %d bytes, want %d", len(m), len(b))
		}
		copy(b, m)
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("recv: nothing came")
	}
}

// TestRdmaCMExchange runs a whole bandwidth client's exchange against a
// server over a message transport, as perftest -R does over its control
// connection: every message one SEND of its own size, addresses 56 bytes,
// and no "done" at the end.
func TestRdmaCMExchange(t *testing.T) {
	ab, ba := make(msgPipe, 1), make(msgPipe, 1)
	var sentC, sentS [][]byte
	client := NewCMConn(msgEnd{in: ba, out: ab, sent: &sentC}, true)
	server := NewCMConn(msgEnd{in: ab, out: ba, sent: &sentS}, false)
	mine, theirs := testDest, testDest
	theirs.QPN, theirs.GIDIndex = 0x22, 1
	rep := BWReport{Size: 65536, Iters: 5000, Peak: 1, Avg: 2, MsgRate: 0.5}
	errc := make(chan error, 1)
	var got BWReport
	go func() {
		errc <- func() error {
			if err := server.Versions(); err != nil {
				return err
			}
			if _, _, err := server.SysData(8192, 64); err != nil {
				return err
			}
			if _, err := server.MTU(2); err != nil {
				return err
			}
			if _, err := server.HandShake(&Dest{}); err != nil { // the sync before the data connections
				return err
			}
			d, err := server.HandShake(&theirs)
			if err != nil {
				return err
			}
			if d != mine {
				return fmt.Errorf("server got %+v, want %+v", d, mine)
			}
			if got, err = server.BWReports(BWReport{}); err != nil {
				return err
			}
			return server.Close(&theirs)
		}()
	}()
	err := func() error {
		if err := client.Versions(); err != nil {
			return err
		}
		if cb, cl, err := client.SysData(4096, 64); err != nil || cb != 8192 || cl != 64 {
			return fmt.Errorf("SysData = %d, %d, %v; want 8192, 64", cb, cl, err)
		}
		if m, err := client.MTU(3); err != nil || m != 2 {
			return fmt.Errorf("MTU = %d, %v; want 2", m, err)
		}
		if d, err := client.HandShake(&Dest{}); err != nil || d != (Dest{}) {
			return fmt.Errorf("sync: %+v, %v", d, err)
		}
		d, err := client.HandShake(&mine)
		if err != nil || d != theirs {
			return fmt.Errorf("HandShake = %+v, %v; want %+v", d, err, theirs)
		}
		if _, err := client.BWReports(rep); err != nil {
			return err
		}
		return client.Close(&mine)
	}()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got != rep {
		t.Errorf("server got report %+v, want %+v", got, rep)
	}
	be64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	var dest, zero [PingpongDestSize]byte
	mine.PutPingpongDest(dest[:])
	want := [][]byte{
		append([]byte("6.06"), make([]byte, 12)...),
		{0, 0, 0x10, 0}, {0, 0, 0, 64},
		[]byte("3\x00"),
		zero[:], dest[:],
		be64(65536), be64(5000), be64(math.Float64bits(1)), be64(math.Float64bits(2)), be64(math.Float64bits(0.5)),
		dest[:],
	}
	if len(sentC) != len(want) {
		t.Fatalf("client sent %d messages, want %d: %q", len(sentC), len(want), sentC)
	}
	for i, m := range sentC {
		if !bytes.Equal(m, want[i]) {
			t.Errorf("client message %d = %q, want %q", i, m, want[i])
		}
	}
	if len(sentS) != len(sentC) {
		t.Errorf("server sent %d messages, the client %d", len(sentS), len(sentC))
	}
}

// The banners of perftest 4.5 with -R (ctx_print_test_info): rdma_cm QPs
// ON, data exchange over rdma_cm, and on the server the lines about the
// client's QPs, printed although they are connected already.
func TestPrintInfoRdmaCM(t *testing.T) {
	tail := " Max inline data : 0[B]\n rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n" + ResultLine
	var b bytes.Buffer
	PrintInfo(&b, &Info{Verb: Write, Device: "rxe0", QPs: 2, Connection: "RC", TxDepth: 128, CQMod: 100,
		MTU: 1024, GIDIndex: 1, RDMACM: true, TOS: -1})
	if !strings.HasSuffix(b.String(), " GID index       : 1\n"+tail) {
		t.Errorf("client banner:\n%s\nwant it to end with\n%s", b.String(), tail)
	}
	b.Reset()
	PrintInfo(&b, &Info{Verb: Read, Server: true, Device: "rxe0", QPs: 1, Connection: "RC", CQMod: 100,
		MTU: 1024, GIDIndex: -1, OutReads: 16, RDMACM: true, TOS: 32})
	want := " Outstand reads  : 16\n rdma_cm QPs\t : ON\n Data ex. method : rdma_cm \tTOS    : 32\n" + ResultLine +
		" Waiting for client rdma_cm QP to connect\n" +
		" Please run the same command with the IB/RoCE interface IP\n" + ResultLine
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("server banner:\n%s\nwant it to end with\n%s", b.String(), want)
	}
}
