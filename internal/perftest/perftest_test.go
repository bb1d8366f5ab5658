package perftest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var testDest = Dest{
	OutReads: 0x10, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000,
	GID: netip.MustParseAddr("::ffff:198.18.0.1").As16(), SRQN: 0,
}

// The message perftest's KEY_PRINT_FMT_GID gives for testDest.
const testDestWire = "0000:0010:000011:abcdef:00001234:00007f0000001000:" +
	"00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:01:00000000:\x00"

func TestDestMarshal(t *testing.T) {
	if len(testDestWire) != DestSize {
		t.Fatalf("wire string is %d bytes, want %d", len(testDestWire), DestSize)
	}
	b := make([]byte, DestSize)
	testDest.Marshal(b)
	if string(b) != testDestWire {
		t.Fatalf("Marshal = %q, want %q", b, testDestWire)
	}
	d, err := ParseDest(b)
	if err != nil || d != testDest {
		t.Fatalf("ParseDest = %+v, %v; want %+v", d, err, testDest)
	}
}

func TestParseDestBad(t *testing.T) {
	for _, s := range []string{
		"",
		testDestWire[:50],
		strings.Replace(testDestWire, "abcdef", "abcxef", 1),
		strings.Replace(testDestWire, ":c6:", ":c6x", 1),
		strings.Replace(testDestWire, "000011", "1000011", 1)[:DestSize],
	} {
		if _, err := ParseDest([]byte(s)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("ParseDest(%q) = %v, want ErrBadMessage", s, err)
		}
	}
}

// peer runs fn as the other end of a pipe and returns what it read.
func exchangePair(t *testing.T, client bool, script func(c *Conn) error, peer func(p net.Conn) error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	errc := make(chan error, 1)
	go func() { errc <- peer(b) }()
	if err := script(NewConn(a, client)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// expect reads want from p (the side that reads first, as a server) or
// after writing reply (as a client); order says which.
func expect(p net.Conn, want, reply []byte, readFirst bool) error {
	got := make([]byte, len(want))
	if !readFirst {
		if _, err := p.Write(reply); err != nil {
			return err
		}
	}
	if _, err := io.ReadFull(p, got); err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return &mismatch{got, want}
	}
	if readFirst {
		_, err := p.Write(reply)
		return err
	}
	return nil
}

type mismatch struct{ got, want []byte }

func (m *mismatch) Error() string { return "got " + quote(m.got) + ", want " + quote(m.want) }
func quote(b []byte) string       { return strings.ReplaceAll(string(b), "\x00", `\0`) }

// The whole start of a perftest client's exchange, against the bytes a
// perftest 4.5 server sends, and the start of a server's.
func TestExchangeClient(t *testing.T) {
	ver := append([]byte("6.06"), make([]byte, 12)...)
	peerVer := append([]byte("6.10"), make([]byte, 12)...)
	exchangePair(t, true, func(c *Conn) error {
		if err := c.Versions(); err != nil {
			return err
		}
		if c.RemoteVersion != "6.10" {
			t.Errorf("RemoteVersion %q", c.RemoteVersion)
		}
		cb, cl, err := c.SysData(4096, 64)
		if err != nil || cb != 8192 || cl != 64 {
			t.Errorf("SysData = %d, %d, %v; want 8192, 64", cb, cl, err)
		}
		mtu, err := c.MTU(3)
		if err != nil || mtu != 2 {
			t.Errorf("MTU = %d, %v; want 2 (the peer's smaller one)", mtu, err)
		}
		d, err := c.HandShake(&testDest)
		if err != nil || d.QPN != 0x22 {
			t.Errorf("HandShake = %+v, %v", d, err)
		}
		r, err := c.BWReports(BWReport{Size: 65536, Iters: 5000, Peak: 1, Avg: 2, MsgRate: 0.5})
		if err != nil || r != (BWReport{}) {
			t.Errorf("BWReports = %+v, %v", r, err)
		}
		return c.Close(&testDest)
	}, func(p net.Conn) error {
		peerDest := []byte(strings.Replace(testDestWire, ":000011:", ":000022:", 1))
		be := func(v uint64, n int) []byte {
			b := make([]byte, n)
			for i := range n {
				b[n-1-i] = byte(v >> (8 * i))
			}
			return b
		}
		steps := [][2][]byte{
			{ver, peerVer},
			{{0, 0, 0x10, 0}, {0, 0, 0x20, 0}},
			{{0, 0, 0, 64}, {0, 0, 0, 64}},
			{[]byte("3\x00"), []byte("2\x00")},
			{[]byte(testDestWire), peerDest},
			{be(65536, 8), be(0, 8)},
			{be(5000, 8), be(0, 8)},
			{be(math.Float64bits(1), 8), be(0, 8)},
			{be(math.Float64bits(2), 8), be(0, 8)},
			{be(math.Float64bits(0.5), 8), be(0, 8)},
			{[]byte(testDestWire), peerDest},
		}
		for i, s := range steps {
			if err := expect(p, s[0], s[1], true); err != nil {
				t.Errorf("step %d: %v", i, err)
				return nil
			}
		}
		done := make([]byte, 5)
		if _, err := io.ReadFull(p, done); err != nil || string(done) != "done\x00" {
			t.Errorf("done: %q, %v", done, err)
		}
		return nil
	})
}

func TestExchangeServerOldPeer(t *testing.T) {
	exchangePair(t, false, func(c *Conn) error {
		if err := c.Versions(); !errors.Is(err, ErrBadMessage) {
			t.Errorf("Versions with a 5.60 peer: %v, want ErrBadMessage", err)
		}
		return nil
	}, func(p net.Conn) error {
		return expect(p, append([]byte("6.06"), make([]byte, 12)...), append([]byte("5.60"), make([]byte, 12)...), false)
	})
}

// A peer before 5.33 sends 4-byte iteration counts.
func TestBWReportsOldIters(t *testing.T) {
	exchangePair(t, false, func(c *Conn) error {
		c.RemoteVersion = "5.32"
		r, err := c.BWReports(BWReport{})
		if err != nil || r.Size != 2 || r.Iters != 7 {
			t.Errorf("BWReports = %+v, %v", r, err)
		}
		return nil
	}, func(p net.Conn) error {
		for _, s := range [][2][]byte{
			{{0, 0, 0, 0, 0, 0, 0, 2}, make([]byte, 8)},
			{{0, 0, 0, 7}, make([]byte, 4)},
			{make([]byte, 8), make([]byte, 8)},
			{make([]byte, 8), make([]byte, 8)},
			{make([]byte, 8), make([]byte, 8)},
		} {
			if err := expect(p, s[1], s[0], false); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestPrintDest(t *testing.T) {
	var b bytes.Buffer
	PrintDest(&b, &testDest, false, Read)
	want := " local address: LID 0000 QPN 0x0011 PSN 0xabcdef OUT 0x10 RKey 0x001234 VAddr 0x007f0000001000\n" +
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:18:00:01\n"
	if b.String() != want {
		t.Errorf("PrintDest =\n%q\nwant\n%q", b.String(), want)
	}
}

func TestBWAndLatency(t *testing.T) {
	var posted, completed []time.Duration
	for i := range 1000 {
		posted = append(posted, time.Duration(i)*time.Microsecond)
		completed = append(completed, time.Duration(i+10)*time.Microsecond)
	}
	r := BW(1<<20, posted, completed, 100, false)
	// 1000 MiB in 1.009 ms.
	if math.Abs(r.Avg-1000/1.009e-3) > 1 || r.Iters != 1000 || r.Peak < r.Avg {
		t.Errorf("BW = %+v", r)
	}
	l := Latency(2, posted, true)
	if l.Typical != 0.5 || l.Min != 0.5 || l.Max != 0.5 || l.Avg != 0.5 || l.Iters != 1000 {
		t.Errorf("Latency = %+v", l)
	}
	var b bytes.Buffer
	PrintLat(&b, l)
	if want := " 2       1000          0.50           0.50         0.50     \t       0.50        \t0.00   \t\t0.50    \t\t0.50   \n"; b.String() != want {
		t.Errorf("PrintLat = %q, want %q", b.String(), want)
	}
	b.Reset()
	Style45.PrintBW(&b, BWReport{Size: 65536, Iters: 5000, Peak: 2751.95, Avg: 2751.21, MsgRate: 0.044019}, false)
	if want := " 65536      5000             2751.95            2751.21\t\t   0.044019\n"; b.String() != want {
		t.Errorf("PrintBW = %q, want %q", b.String(), want)
	}
}

// The banner of an ib_write_bw client on RoCE, as perftest 4.5 prints it
// (ctx_print_test_info) for rxe0, GID index 1, without ibv_wr support.
func TestPrintInfo(t *testing.T) {
	var b bytes.Buffer
	PrintInfo(&b, &Info{Verb: Write, Device: "rxe0", QPs: 1, Connection: "RC", TxDepth: 128, CQMod: 100,
		MTU: 1024, GIDIndex: 1})
	want := ResultLine +
		"                    RDMA_Write BW Test\n" +
		" Dual-port       : OFF\t\tDevice         : rxe0\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: Unsupported\n" +
		" ibv_wr* API     : OFF\n" +
		" TX depth        : 128\n" +
		" CQ Moderation   : 100\n" +
		" Mtu             : 1024[B]\n" +
		" Link type       : Ethernet\n" +
		" GID index       : 1\n" +
		" Max inline data : 0[B]\n" +
		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		ResultLine
	if b.String() != want {
		t.Errorf("PrintInfo =\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	PrintInfo(&b, &Info{Verb: Atomic, Atomic: "FETCH_AND_ADD", Server: true, Device: "rxe0", QPs: 1, Connection: "RC",
		CQMod: 100, MTU: 1024, GIDIndex: -1, OutReads: 16})
	for _, s := range []string{"RDMA_Atomic", "Atomic FETCH_AND_ADD BW Test\n", " Outstand reads  : 16\n"} {
		if s == "RDMA_Atomic" {
			if strings.Contains(b.String(), s) {
				t.Errorf("atomic banner says %q", s)
			}
			continue
		}
		if !strings.Contains(b.String(), s) {
			t.Errorf("atomic server banner lacks %q:\n%s", s, b.String())
		}
	}
	if strings.Contains(b.String(), "TX depth") || strings.Contains(b.String(), "GID index") {
		t.Errorf("server banner with TX depth or GID index:\n%s", b.String())
	}
}

// TestBWNoTime: messages whose posts and completions read the same clock
// tick give no rate, never bytes over a made-up nanosecond, and such a
// message does not make the peak.
func TestBWNoTime(t *testing.T) {
	same := []time.Duration{5, 5, 5, 5}
	if r := BW(65536, same, same, 4, false); r.Peak != 0 || r.Avg != 0 || r.Iters != 4 {
		t.Fatalf("BW over no time = %+v, want zero rates, 4 iterations", r)
	}
	posted := []time.Duration{0, time.Millisecond, time.Millisecond, 2 * time.Millisecond}
	completed := []time.Duration{time.Millisecond, time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}
	r := BW(1<<20, posted, completed, 1, false)
	// Message 1 posts and completes at the same tick; the best measured
	// run is messages 1 and 2, 2 MiB in 1 ms.
	if math.Abs(r.Peak-2000) > 1e-6 || r.Peak < r.Avg {
		t.Fatalf("peak %v MB/s, average %v: want 2000", r.Peak, r.Avg)
	}
	if r := Rate(65536, 10, 0, false); r.Peak != 0 || r.Avg != 0 || r.Iters != 10 {
		t.Fatalf("Rate over no time = %+v", r)
	}
	if r := Rate(1<<20, 10, time.Second, false); r.Avg != 10 || r.Peak != 10 || r.MsgRate != 10e-6 {
		t.Fatalf("Rate(1 MiB × 10 in 1 s) = %+v, want 10 MB/s peak and average", r)
	}
}

// Perftest 25.01's lines, as rxe's ib_write_bw printed them in Debian
// trixie's guest: the banner's two-column lines, the MiB/sec header and the
// wider gap before the message rate; the release is told from the peer's
// version string.
func TestStyle2501(t *testing.T) {
	var b strings.Builder
	Style2501.PrintBWHeader(&b, false)
	Style2501.PrintBW(&b, BWReport{Size: 65536, Iters: 100, Peak: 46.24, Avg: 46.24, MsgRate: 0.000740}, false)
	want := ResultLine +
		" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n" +
		" 65536      100              46.24              46.24  \t\t     0.000740\n"
	if b.String() != want {
		t.Errorf("25.01's table:\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	PrintInfo(&b, &Info{Verb: Write, Device: "tap0", QPs: 1, Connection: "RC", CQMod: 1, MTU: 4096, GIDIndex: 1, Style: Style2501})
	for _, l := range []string{" PCIe relax order: Unsupported\t\tLock-free      : OFF\n", " ibv_wr* API     : OFF\t\tUsing DDP      : OFF\n"} {
		if !strings.Contains(b.String(), l) {
			t.Errorf("25.01's banner lacks %q:\n%s", l, b.String())
		}
	}
	for v, want := range map[string]Style{"6.06": Style45, "5.70": Style45, "6.24": Style2501, "6.29": Style2501, "": Style45, "junk": Style45} {
		if got := StyleOf(v); got != want {
			t.Errorf("StyleOf(%q) = %v, want %v", v, got, want)
		}
	}
	if Style2501.Version() != "6.24" || Style45.Version() != Version {
		t.Errorf("versions %q %q", Style2501.Version(), Style45.Version())
	}
}

// fakeTransport delivers recv and fails sends with sendErr.
type fakeTransport struct {
	recv    []byte
	sendErr error
}

func (f *fakeTransport) Send(b []byte) error { return f.sendErr }
func (f *fakeTransport) Recv(b []byte) error { copy(b, f.recv); return nil }

// Over rdma_cm the server's last SEND may be flushed by the client's DREQ
// once the client has it: Close is content then, and not for other
// errors, nor on the client's side.
func TestCloseServerPeerGone(t *testing.T) {
	var d Dest
	gone := fmt.Errorf("%w (flushed)", ErrPeerClosed)
	if err := NewCMConn(&fakeTransport{recv: make([]byte, PingpongDestSize), sendErr: gone}, false).Close(&d); err != nil {
		t.Errorf("server, peer gone after our last SEND: %v", err)
	}
	if err := NewCMConn(&fakeTransport{recv: make([]byte, PingpongDestSize), sendErr: ErrBadMessage}, false).Close(&d); err == nil {
		t.Error("server, another send error: nil")
	}
	if err := NewCMConn(&fakeTransport{recv: make([]byte, PingpongDestSize), sendErr: gone}, true).Close(&d); err == nil {
		t.Error("client, peer gone: nil")
	}
}
