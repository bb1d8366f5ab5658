package bpf

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The verdict tests run the program in the kernel with BPF_PROG_TEST_RUN.
//
// bpf_redirect_map returns XDP_REDIRECT only when the XSKMAP slot for the
// queue holds a socket; with the slot empty it returns the fallback action in
// its flags argument, XDP_PASS, so a test with an empty map could not tell a
// RoCE frame from any other. The tests therefore put a real AF_XDP socket in
// slot 0 (the queue BPF_PROG_TEST_RUN reports, rx_queue_index 0): the kernel
// accepts an unbound socket in an XSKMAP, and test runs do not deliver
// redirected frames, only report the verdict. A RoCE frame then gets
// XDP_REDIRECT (4) and everything else XDP_PASS (2). The same frames are also
// run with the slot empty and with only another queue's slot filled, where
// every verdict must be XDP_PASS.

// loadT loads the program or skips the test when the kernel or the
// privileges are missing.
func loadT(t testing.TB, opts Options) *Program {
	t.Helper()
	p, err := Load(opts)
	if err != nil {
		if errors.Is(err, ErrPermission) || errors.Is(err, ErrNoBPF) || errors.Is(err, ErrNoXDP) ||
			errors.Is(err, ErrNoFrags) {
			t.Skipf("cannot load xdp program: %v", err)
		}
		t.Fatalf("Load(%+v): %v", opts, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// xskT returns an AF_XDP socket (unbound) for the XSKMAP, or skips.
func xskT(t testing.TB) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP sockets: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// variants are the two programs every verdict test runs on.
var variants = []struct {
	name string
	opts Options
}{
	{"plain", Options{}},
	{"frags", Options{Frags: true}},
}

func verdictName(v uint32) string {
	switch v {
	case XDPAborted:
		return "XDP_ABORTED"
	case XDPDrop:
		return "XDP_DROP"
	case XDPPass:
		return "XDP_PASS"
	case XDPTx:
		return "XDP_TX"
	case XDPRedirect:
		return "XDP_REDIRECT"
	}
	return fmt.Sprintf("verdict(%d)", v)
}

type verdictCase struct {
	name     string
	frame    []byte
	redirect bool
}

func verdictCases() []verdictCase {
	udp4 := func(dport uint16) []byte {
		b := appendEth(nil, ethIPv4)
		b = appendIPv4(b, ipv4Opts{payload: 8 + 32})
		b = appendUDP(b, dport, 32)
		return append(b, make([]byte, 32)...)
	}
	udp6 := func(dport uint16) []byte {
		b := appendEth(nil, ethIPv6)
		b = appendIPv6(b, protoUDP, 8+32)
		b = appendUDP(b, dport, 32)
		return append(b, make([]byte, 32)...)
	}
	// A TCP segment whose destination port field reads 4791.
	tcp4 := func() []byte {
		b := appendEth(nil, ethIPv4)
		b = appendIPv4(b, ipv4Opts{proto: protoTCP, payload: 20})
		b = appendUDP(b, RoCEv2Port, 12) // ports sit where UDP's do
		return append(b, make([]byte, 12)...)
	}
	tcp6 := func() []byte {
		b := appendEth(nil, ethIPv6)
		b = appendIPv6(b, protoTCP, 20)
		b = appendUDP(b, RoCEv2Port, 12)
		return append(b, make([]byte, 12)...)
	}
	arp := func() []byte {
		b := appendEth(nil, ethARP)
		b = append(b, 0, 1, 8, 0, 6, 4, 0, 1)
		b = append(b, testSrcMAC...)
		b = append(b, 198, 18, 0, 1)
		b = append(b, make([]byte, 6)...)
		return append(b, 198, 18, 0, 2, 0x12, 0xb7, 0x12, 0xb7, 0x12, 0xb7, 0x12, 0xb7)
	}
	ipv4With := func(o ipv4Opts) []byte {
		o.payload = 8 + roceLen(16)
		b := appendEth(nil, ethIPv4)
		b = appendIPv4(b, o)
		b = appendUDP(b, RoCEv2Port, roceLen(16))
		return appendBTH(b, 16)
	}
	// IPv6 with a hop-by-hop header before UDP: refused (no extension headers).
	ipv6Ext := func() []byte {
		b := appendEth(nil, ethIPv6)
		b = appendIPv6(b, protoHop, 8+8+roceLen(16))
		b = append(b, protoUDP, 0, 1, 4, 0, 0, 0, 0) // next UDP, len 0, PadN
		b = appendUDP(b, RoCEv2Port, roceLen(16))
		return appendBTH(b, 16)
	}
	// IPv6 frame whose version nibble says 4.
	ipv6BadVersion := func() []byte {
		b := roce6(16)
		b[14] = 0x40
		return b
	}
	// IPv4 frame whose version/IHL byte says IPv6.
	ipv4BadVersion := func() []byte {
		b := roce4(16)
		b[14] = 0x65
		return b
	}
	qinq := func() []byte {
		b := appendEth(nil, ethQinQ)
		b = appendVLAN(b, 10, ethVLAN)
		b = appendVLAN(b, 20, ethIPv4)
		b = appendIPv4(b, ipv4Opts{payload: 8 + roceLen(16)})
		b = appendUDP(b, RoCEv2Port, roceLen(16))
		return appendBTH(b, 16)
	}
	doubleVLAN := func() []byte {
		b := appendEth(nil, ethVLAN)
		b = appendVLAN(b, 10, ethVLAN)
		b = appendVLAN(b, 20, ethIPv4)
		b = appendIPv4(b, ipv4Opts{payload: 8 + roceLen(16)})
		b = appendUDP(b, RoCEv2Port, roceLen(16))
		return appendBTH(b, 16)
	}
	vlanUDP := func() []byte {
		b := appendEth(nil, ethVLAN)
		b = appendVLAN(b, 100, ethIPv4)
		b = appendIPv4(b, ipv4Opts{payload: 8 + 32})
		b = appendUDP(b, 4792, 32)
		return append(b, make([]byte, 32)...)
	}
	vlanARP := func() []byte {
		b := appendEth(nil, ethVLAN)
		b = appendVLAN(b, 100, ethARP)
		return append(b, make([]byte, 46)...)
	}
	// The byte-swapped port: catches a missing or doubled byte swap.
	swapped := udp4(0xb712)

	return []verdictCase{
		{"roce ipv4", roce4(64), true},
		{"roce ipv4 minimal", roce4(0), true},
		{"roce ipv6", roce6(64), true},
		{"roce vlan ipv4", roceVLAN4(64), true},
		{"roce vlan ipv6", roceVLAN6(64), true},
		{"roce ipv4 1 KiB", roce4(1024), true},
		{"roce ipv4 tos ecn ttl 1", func() []byte { b := roce4(16); b[15], b[22] = 0x02, 1; return b }(), true},
		{"roce ipv4 reserved flag, DF clear", ipv4With(ipv4Opts{fragWord: 0x8000}), true},
		{"udp ipv4 port 4792", udp4(4792), false},
		{"udp ipv4 port 53", udp4(53), false},
		{"udp ipv4 port 4791 byte-swapped", swapped, false},
		{"udp ipv6 port 4790", udp6(4790), false},
		{"tcp ipv4 port 4791", tcp4(), false},
		{"tcp ipv6 port 4791", tcp6(), false},
		{"arp", arp(), false},
		{"vlan arp", vlanARP(), false},
		{"vlan udp other port", vlanUDP(), false},
		{"ipv4 with options", ipv4With(ipv4Opts{options: 4}), false},
		{"ipv4 with 40 bytes of options", ipv4With(ipv4Opts{options: 40}), false},
		{"ipv4 fragment MF set", ipv4With(ipv4Opts{fragWord: 0x2000}), false},
		{"ipv4 fragment MF and DF", ipv4With(ipv4Opts{fragWord: 0x6000}), false},
		{"ipv4 fragment offset 1", ipv4With(ipv4Opts{fragWord: 0x0001}), false},
		{"ipv4 fragment offset 0x1fff", ipv4With(ipv4Opts{fragWord: 0x1fff}), false},
		{"ipv4 last fragment offset 185", ipv4With(ipv4Opts{fragWord: 185}), false},
		{"ipv4 bad version", ipv4BadVersion(), false},
		{"ipv6 bad version", ipv6BadVersion(), false},
		{"ipv6 hop-by-hop then udp", ipv6Ext(), false},
		{"qinq 802.1ad", qinq(), false},
		{"two 802.1q tags", doubleVLAN(), false},
		{"ethernet only", appendEth(nil, ethIPv4), false},
		{"ipx", append(appendEth(nil, 0x8137), make([]byte, 46)...), false},
	}
}

func TestVerdicts(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := loadT(t, v.opts)
			xsk := xskT(t)
			cases := verdictCases()

			// Slot 0 empty: the fallback action, XDP_PASS, for everything.
			for _, c := range cases {
				got, err := p.Run(c.frame)
				if err != nil {
					t.Fatalf("%s: Run: %v", c.name, err)
				}
				if got != XDPPass {
					t.Errorf("%s with empty xskmap: verdict %s, want XDP_PASS", c.name, verdictName(got))
				}
			}

			// Only queue 1 has a socket: frames on queue 0 still pass, so
			// the key is the receive queue, not a constant.
			if err := p.SetSocket(1, xsk); err != nil {
				t.Fatalf("SetSocket(1): %v", err)
			}
			for _, c := range cases {
				if got, err := p.Run(c.frame); err != nil || got != XDPPass {
					t.Errorf("%s with socket on queue 1 only: verdict %s, %v; want XDP_PASS", c.name, verdictName(got), err)
				}
			}
			if err := p.ClearSocket(1); err != nil {
				t.Fatalf("ClearSocket(1): %v", err)
			}

			// Queue 0 has a socket: the program's own decision shows.
			if err := p.SetSocket(0, xsk); err != nil {
				t.Fatalf("SetSocket(0): %v", err)
			}
			for _, c := range cases {
				want := uint32(XDPPass)
				if c.redirect {
					want = XDPRedirect
				}
				got, err := p.Run(c.frame)
				if err != nil {
					t.Fatalf("%s: Run: %v", c.name, err)
				}
				if got != want {
					t.Errorf("%s: verdict %s, want %s", c.name, verdictName(got), verdictName(want))
				}
			}

			// Cleared again: back to XDP_PASS.
			if err := p.ClearSocket(0); err != nil {
				t.Fatalf("ClearSocket(0): %v", err)
			}
			if got, err := p.Run(roce4(16)); err != nil || got != XDPPass {
				t.Errorf("roce ipv4 after ClearSocket: verdict %s, %v; want XDP_PASS", verdictName(got), err)
			}
		})
	}
}

// TestTruncated cuts each good RoCE frame at every length from the smallest
// one BPF_PROG_TEST_RUN accepts (14 bytes, an Ethernet header) to the end of
// the UDP header: every prefix shorter than Ethernet+IP+UDP must pass, the
// one ending exactly after UDP is redirected. The verifier already proves no
// read goes past data_end; this proves the checks are not too loose or too
// strict by a byte.
func TestTruncated(t *testing.T) {
	frames := []struct {
		name   string
		frame  []byte
		udpEnd int
	}{
		{"ipv4", roce4(16), 14 + 20 + 8},
		{"ipv6", roce6(16), 14 + 40 + 8},
		{"vlan ipv4", roceVLAN4(16), 18 + 20 + 8},
		{"vlan ipv6", roceVLAN6(16), 18 + 40 + 8},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			p := loadT(t, v.opts)
			if err := p.SetSocket(0, xskT(t)); err != nil {
				t.Fatalf("SetSocket: %v", err)
			}
			for _, f := range frames {
				for n := 14; n <= f.udpEnd; n++ {
					want := uint32(XDPPass)
					if n == f.udpEnd {
						want = XDPRedirect
					}
					// Copy so the kernel sees exactly n bytes.
					frame := append([]byte(nil), f.frame[:n]...)
					got, err := p.Run(frame)
					if err != nil {
						t.Fatalf("%s cut at %d: Run: %v", f.name, n, err)
					}
					if got != want {
						t.Errorf("%s cut at %d bytes: verdict %s, want %s", f.name, n, verdictName(got), verdictName(want))
					}
				}
			}
		})
	}
}

// TestRunTooShort documents that BPF_PROG_TEST_RUN refuses frames shorter
// than an Ethernet header, so TestTruncated starts at 14 bytes.
func TestRunTooShort(t *testing.T) {
	p := loadT(t, Options{})
	if _, err := p.Run(make([]byte, 13)); err == nil {
		t.Errorf("Run(13 bytes) succeeded; the kernel used to refuse it (TestTruncated could start lower)")
	}
}

// TestJumboFrags runs a 9000-byte RoCE frame, which BPF_PROG_TEST_RUN spreads
// over several buffers (frags), through the multi-buffer variant.
func TestJumboFrags(t *testing.T) {
	p := loadT(t, Options{Frags: true})
	if err := p.SetSocket(0, xskT(t)); err != nil {
		t.Fatalf("SetSocket: %v", err)
	}
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"roce ipv4 9000", roce4(9000 - 14 - 20 - 8 - 16), XDPRedirect},
		{"roce vlan ipv6 9000", roceVLAN6(9000 - 18 - 40 - 8 - 16), XDPRedirect},
		{"udp 9000 other port", func() []byte {
			b := appendEth(nil, ethIPv4)
			b = appendIPv4(b, ipv4Opts{payload: 8 + 8958})
			b = appendUDP(b, 9, 8958)
			return append(b, make([]byte, 8958)...)
		}(), XDPPass},
	} {
		got, err := p.Run(c.frame)
		if err != nil {
			t.Fatalf("%s (%d bytes): Run: %v", c.name, len(c.frame), err)
		}
		if got != c.want {
			t.Errorf("%s: verdict %s, want %s", c.name, verdictName(got), verdictName(c.want))
		}
	}
}

func TestOptionsAndErrors(t *testing.T) {
	p := loadT(t, Options{})
	if got := p.Options().MaxQueues; got != DefaultMaxQueues {
		t.Errorf("Options().MaxQueues = %d, want %d", got, DefaultMaxQueues)
	}
	xsk := xskT(t)
	for _, q := range []int{-1, DefaultMaxQueues, 1 << 20} {
		if err := p.SetSocket(q, xsk); err == nil {
			t.Errorf("SetSocket(%d) succeeded, want out of range", q)
		}
		if err := p.ClearSocket(q); err == nil {
			t.Errorf("ClearSocket(%d) succeeded, want out of range", q)
		}
	}
	if err := p.SetSocket(DefaultMaxQueues-1, xsk); err != nil {
		t.Errorf("SetSocket(%d): %v", DefaultMaxQueues-1, err)
	}
	if err := p.SetSocket(0, -1); err == nil {
		t.Errorf("SetSocket(0, -1) succeeded")
	}
	// A file that is not an AF_XDP socket is refused by the kernel.
	if err := p.SetSocket(0, p.FD()); err == nil {
		t.Errorf("SetSocket(0, program fd) succeeded, want an error")
	}
	if err := p.ClearSocket(3); err != nil {
		t.Errorf("ClearSocket of an empty slot: %v", err)
	}
	if _, err := Load(Options{MaxQueues: -1}); err == nil {
		t.Errorf("Load(MaxQueues: -1) succeeded")
	}

	small := loadT(t, Options{MaxQueues: 2})
	if err := small.SetSocket(2, xsk); err == nil {
		t.Errorf("SetSocket(2) with MaxQueues 2 succeeded")
	}
	if err := small.SetSocket(1, xsk); err != nil {
		t.Errorf("SetSocket(1) with MaxQueues 2: %v", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	p := loadT(t, Options{})
	for i := 0; i < 3; i++ {
		if err := p.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if err := p.Detach(); err != nil {
		t.Errorf("Detach after Close: %v", err)
	}
	if _, err := p.Attach(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close: %v, want ErrClosed", err)
	}
	if err := p.SetSocket(0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("SetSocket after Close: %v, want ErrClosed", err)
	}
	if err := p.ClearSocket(0); !errors.Is(err, ErrClosed) {
		t.Errorf("ClearSocket after Close: %v, want ErrClosed", err)
	}
	if err := p.SetLoss(0.5); !errors.Is(err, ErrClosed) {
		t.Errorf("SetLoss after Close: %v, want ErrClosed", err)
	}
	if _, err := p.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters after Close: %v, want ErrClosed", err)
	}
}

func TestInstructions(t *testing.T) {
	for _, v := range variants {
		p := loadT(t, v.opts)
		insns := p.Instructions()
		text := fmt.Sprint(insns)
		for _, want := range []string{"FnRedirectMap", "XSKMap", "FnGetPrandomU32", "PerCPUArray", lblIPv4, lblIPv6,
			lblRoCE, lblDrop, lblPass} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: Instructions() does not mention %q:\n%s", v.name, want, text)
			}
		}
		// Instructions returns a copy: changing it does not touch the program's.
		insns[0] = insns[len(insns)-1]
		if p.Instructions()[0] == insns[0] {
			t.Errorf("%s: Instructions() shares its backing array", v.name)
		}
	}
}

func TestAttachModeString(t *testing.T) {
	for _, c := range []struct {
		m    AttachMode
		want string
	}{
		{ModeNone, "none"},
		{ModeDriver, "driver"},
		{ModeGeneric, "generic"},
		{AttachMode(9), "AttachMode(9)"},
	} {
		if got := c.m.String(); got != c.want {
			t.Errorf("AttachMode(%d).String() = %q, want %q", int(c.m), got, c.want)
		}
	}
}

// TestConcurrentClose races Close against map updates, counter reads and
// test runs: each call either works or says ErrClosed (run with -race).
func TestConcurrentClose(t *testing.T) {
	const goroutines = 5
	p := loadT(t, Options{})
	xsk := xskT(t)
	frame := roce4(16)
	done := make(chan struct{})
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				var err error
				switch g {
				case 0:
					err = p.SetSocket(0, xsk)
				case 1:
					err = p.ClearSocket(0)
				case 2:
					_, err = p.Run(frame)
				case 3:
					err = p.SetLoss(0.5)
					_ = p.Loss()
				case 4:
					_, err = p.Counters()
				}
				if err != nil && !errors.Is(err, ErrClosed) {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := p.Run(frame); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
	close(done)
	for g := 0; g < goroutines; g++ {
		if err := <-errs; err != nil {
			t.Errorf("call racing Close: %v", err)
		}
	}
}
