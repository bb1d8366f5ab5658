//go:build linux

package cli

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// The ping data as rping writes it (the strings of rdma-core's rping -v).
func TestRpingPattern(t *testing.T) {
	for _, tc := range []struct {
		ping, size int
		want       string
	}{
		{0, 64, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"},
		{1, 64, "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs"},
		{57, 64, "rdma-ping-57: zABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnop"},
		{58, 64, "rdma-ping-58: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopq"},
		{0, 23, "rdma-ping-0: ABCDEFGHI"},
		{1000000, 23, "rdma-ping-1000000: WXY"},
		{2147483647, 23, "rdma-ping-2147483647: "},
		{5, 1, ""}, // the size quirk: snprintf truncates to nothing
		{3, 10, "rdma-ping"},
	} {
		b := bytes.Repeat([]byte{0xee}, tc.size)
		rpingFill(b, tc.ping)
		if b[len(b)-1] != 0 || string(cstring(b)) != tc.want || len(cstring(b)) != tc.size-1 && tc.size > 20 {
			t.Errorf("ping %d, size %d: %q, want %q", tc.ping, tc.size, b, tc.want)
		}
	}
	// Every byte of a long buffer: the letters run on, wrapping 'z' to 'A'.
	b := make([]byte, 300)
	rpingFill(b, 7)
	for i := len("rdma-ping-7: "); i < len(b)-1; i++ {
		if want := byte(65 + (7+i-13)%58); b[i] != want {
			t.Fatalf("byte %d = %q, want %q", i, b[i], want)
		}
	}
}

// struct rping_rdma_info: 16 bytes, big-endian buf, rkey, size.
func TestRpingInfo(t *testing.T) {
	b := make([]byte, rpingInfoSize)
	rpingInfo(b).Encode(0x0102030405060708, 0x0a0b0c0d, 64)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 64}
	if !bytes.Equal(b, want) {
		t.Errorf("encoded % x, want % x", b, want)
	}
	i := rpingInfo(b)
	if i.Buf() != 0x0102030405060708 || i.RKey() != 0x0a0b0c0d || i.Size() != 64 {
		t.Errorf("decoded %#x %#x %d", i.Buf(), i.RKey(), i.Size())
	}
	// The server's go-ahead: 16 zero bytes read as nothing.
	z := rpingInfo(make([]byte, rpingInfoSize))
	if z.Buf() != 0 || z.RKey() != 0 || z.Size() != 0 {
		t.Error("zeros do not decode to zero")
	}
}

// usage44 is the usage rdma-core 44's name printed (after its message for
// -x, where it has one), captured in testdata/usage-NAME-44.txt from
// Debian's binary run as ./NAME; the clone is NAME.
func usage44(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/usage-" + name + "-44.txt")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "./"+name, name)
}

// Command lines: rping's messages, usage and statuses; the options read.
func TestRpingFlags(t *testing.T) {
	rpingUsageText := usage44(t, "rping")
	b := &strings.Builder{}
	rpingUsage(b)
	if b.String() != rpingUsageText {
		t.Fatalf("usage:\n%s\nwant (rping 44's):\n%s", b, rpingUsageText)
	}
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, 22, rpingUsageText, ""},
		{[]string{"-v"}, 22, rpingUsageText, ""},
		{[]string{"-s", "-x"}, 22, rpingUsageText, ""},
		{[]string{"-s", "-h"}, 22, rpingUsageText, ""},
		{[]string{"-s", "-t", "1"}, 22, rpingUsageText, ""}, // in the optstring, not handled
		{[]string{"-s", "-p"}, 22, rpingUsageText, ""},
		{[]string{"-s", "-S", "1"}, 22, "", "Invalid size 1 (valid range is 23 to 65536)\n"},
		{[]string{"-s", "-S", "65536"}, 22, "", "Invalid size 65536 (valid range is 23 to 65536)\n"},
		{[]string{"-c", "-a", "198.18.0.2", "-C", "-1"}, 22, "", "Invalid count -1\n"},
		{[]string{"-c", "-S", "22", "-S", "30", "-C", "-1"}, 22, "", "Invalid size 22 (valid range is 23 to 65536)\nInvalid count -1\n"},
		{[]string{"-s", "-S", "0", "-a", "0.0.0.0"}, 22, "", "Invalid size 0 (valid range is 23 to 65536)\nInvalid size 0 (valid range is 23 to 65536)\n"},
		{[]string{"-c", "-x", "-S", "1"}, 22, rpingUsageText, ""},
	} {
		var out, errb bytes.Buffer
		err := Run(context.Background(), append([]string{"rping"}, tc.args...), &out, &errb)
		if ExitCode(err) != tc.code || !Reported(err) || out.String() != tc.stdout || errb.String() != tc.stderr {
			t.Errorf("rping %q: exit %d (%v)\nstdout %q\nstderr %q\nwant exit %d, %q, %q", tc.args, ExitCode(err), err,
				out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
		}
	}

	// What the flags set, and -d's lines for the flags after it.
	var out, errb bytes.Buffer
	o, _, done := parseRping(context.Background(), &out, &errb,
		[]string{"-v", "-d", "-sVS", "100", "-C", "7", "-p", "7999x", "-a", "198.18.0.2", "-I", "::1", "-P", "-q", "extra"})
	if done {
		t.Fatalf("parse failed: %q %q", out.String(), errb.String())
	}
	want := rpingOptions{server: 1, addr: netip.MustParseAddr("198.18.0.2"), src: netip.MustParseAddr("::1"), port: 7999,
		count: 7, size: 100, verbose: true, validate: true, debug: true, persistent: true, selfQP: true}
	if *o != want {
		t.Errorf("options %+v, want %+v", *o, want)
	}
	if out.String() != "server\nvalidate data\nsize 100\ncount 7\nport 7999\n" || errb.Len() != 0 {
		t.Errorf("-d lines %q, stderr %q", out.String(), errb.String())
	}
	// The quirk: a later -a that resolves clears a bad -S's status.
	o, _, done = parseRping(context.Background(), &out, &errb, []string{"-c", "-S", "5", "-a", "198.18.0.2"})
	if done || o.size != 5 {
		t.Errorf("-S 5 then -a: %+v, done %v", o, done)
	}
	// Defaults.
	o, _, _ = parseRping(context.Background(), &out, &errb, []string{"-c"})
	if o.addr != netip.IPv4Unspecified() || o.port != 7174 || o.size != 64 || o.count != 0 || o.src.IsValid() {
		t.Errorf("defaults %+v", *o)
	}
	// xroce help rping: the usage, and no failure.
	out.Reset()
	if err := Run(context.Background(), []string{"help", "rping"}, &out, &errb); err != nil || out.String() != rpingUsageText {
		t.Errorf("help rping: %v\n%s", err, out.String())
	}
}

func TestUcmatoseFlags(t *testing.T) {
	wantUsage := usage44(t, "ucmatose")
	for _, tc := range []struct {
		args []string
		want string // stderr then stdout
	}{
		{[]string{"-x"}, wantUsage},
		{[]string{"-s"}, strings.Replace(wantUsage, "invalid option -- 'x'", "option requires an argument -- 's'", 1)},
		{[]string{"-c", "2", "-h"}, strings.Replace(wantUsage, "'x'", "'h'", 1)},
	} {
		var out, errb bytes.Buffer
		err := Run(context.Background(), append([]string{"ucmatose"}, tc.args...), &out, &errb)
		if ExitCode(err) != 1 || !Reported(err) || errb.String()+out.String() != tc.want {
			t.Errorf("ucmatose %q: exit %d\n%s%s\nwant exit 1 and\n%s", tc.args, ExitCode(err), errb.String(), out.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	o, _, done := parseUcmatose(&out, &errb, []string{"-s", "198.18.0.2", "-b", "198.18.0.1", "-f", "IPv6", "-P", "IB", "-c", "3",
		"-C", "20", "-S", "50", "-t", "0x40", "-p", "8000", "-m", "-a", "18", "-d", "veth0"})
	if done {
		t.Fatal(errb.String())
	}
	if o.dst != "198.18.0.2" || o.src != "198.18.0.1" || !o.numeric || o.ps != 0x13f || o.connections != 3 || o.count != 20 ||
		o.size != 50 || o.tos != 0x40 || !o.setTOS || o.port != "8000" || !o.migrate || o.ifname != "veth0" {
		t.Errorf("options %+v", *o)
	}
	o, _, _ = parseUcmatose(&out, &errb, []string{"-f", "dns", "-P", "udp"})
	if errb.String() != "Warning: unknown address format\nWarning: unknown port space format\n" ||
		o.dst != "" || o.ps != 0x106 || o.connections != 1 || o.count != 10 || o.size != 100 || o.port != "7471" || o.numeric {
		t.Errorf("warnings %q, defaults %+v", errb.String(), *o)
	}
}

func TestRdmaServerClientFlags(t *testing.T) {
	for _, name := range []string{"rdma_server", "rdma_client"} {
		want := usage44(t, name)
		var out, errb bytes.Buffer
		err := Run(context.Background(), []string{name, "-p", "1", "-x"}, &out, &errb)
		if ExitCode(err) != 1 || errb.String()+out.String() != want {
			t.Errorf("%s -x: exit %d\n%s%s\nwant exit 1 and\n%s", name, ExitCode(err), errb.String(), out.String(), want)
		}
		o, _, _ := parseRdmaEP(&out, &errb, name, "127.0.0.1", []string{"-s198.18.0.9", "-p", "99", "-d", "eth1"})
		if o.addr != "198.18.0.9" || o.port != "99" || o.ifname != "eth1" {
			t.Errorf("%s: %+v", name, *o)
		}
	}
	// Names that do not resolve, as rdma_getaddrinfo reports them.
	var out, errb bytes.Buffer
	err := Run(context.Background(), []string{"rdma_client", "-s", "198.18.0.2", "-p", "no-such-service"}, &out, &errb)
	if ExitCode(err) != 248 || out.String() != "rdma_client: start\nrdma_getaddrinfo: Servname not supported for ai_socktype\nrdma_client: end -8\n" {
		t.Errorf("bad port: exit %d\n%s%s", ExitCode(err), out.String(), errb.String())
	}
}
