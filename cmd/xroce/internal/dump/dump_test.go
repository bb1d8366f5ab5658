package dump

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
)

// run runs xroce dump with args, which start with "dump", as the xroce
// binary would.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return clitest.Run(t, Cmd, args...)
}

// TestDumpCaptures decodes every real rxe capture: every RoCE frame parses
// and its ICRC is good, with the frame counts the capture README gives.
func TestDumpCaptures(t *testing.T) {
	want := map[string]int{
		"01_rc_pingpong.pcap": 50, "02_ud_pingpong.pcap": 10, "03_write_bw_s64.pcap": 40,
		"04_write_bw_s8192.pcap": 90, "05_read_bw_s8192.pcap": 90, "06_atomic_bw.pcap": 40,
		"07_send_bw_s4096.pcap": 50, "08_uc_write_bw_s1500.pcap": 20, "09_rping_rdmacm.pcap": 29,
		"11_read_bw_loss10_resp.pcap": 725,
	}
	for name, frames := range want {
		t.Run(name, func(t *testing.T) {
			out, _, err := run(t, "dump", filepath.Join(clitest.Captures, name))
			if err != nil {
				t.Fatalf("dump: %v", err)
			}
			s := clitest.ParseSummary(t, out)
			if s.RoCE != frames || s.OK != frames || s.Bad != 0 || s.Malformed != 0 {
				t.Errorf("summary = %+v, want %d RoCE frames all with good ICRC", s, frames)
			}
			if got := strings.Count(out, " ICRC ok\n"); got != frames {
				t.Errorf("%d packet lines with ICRC ok, want %d", got, frames)
			}
		})
	}
}

func TestDumpLine(t *testing.T) {
	out, _, err := run(t, "dump", "-c", "5", filepath.Join(clitest.Captures, "01_rc_pingpong.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	// Values read with tshark -d udp.port==4791,infiniband.
	for _, want := range []string{
		"     1 0.000000 198.18.0.1 > 198.18.0.2 RC SEND_FIRST                QP 0x000035 PSN 6142730    len 1024 ICRC ok",
		"     4 0.000855 198.18.0.1 > 198.18.0.2 RC SEND_LAST                 QP 0x000035 PSN 6142733  A len 1024 ICRC ok",
		"     5 0.003118 198.18.0.2 > 198.18.0.1 RC ACKNOWLEDGE               QP 0x000031 PSN 6142733    AETH ACK credits=invalid msn 1 len 0 ICRC ok",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks line\n%s\ngot:\n%s", want, out)
		}
	}
	if s := clitest.ParseSummary(t, out); s.RoCE != 5 {
		t.Errorf("-c 5 decoded %d packets", s.RoCE)
	}
}

func TestDumpVerbose(t *testing.T) {
	out, _, err := run(t, "dump", "-v", "-c", "2", filepath.Join(clitest.Captures, "06_atomic_bw.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"BTH: base transport header, 12 bytes (opcode 0x14 = RC FETCH_ADD)",
		"AtomicETH: atomic extended transport header, 28 bytes",
		"|  OpCode 0x14  |",
		"|         P_Key 0xffff          |",
		"AtomicAckETH",
		"UDP       src port",
		"flags DF",
		"ICRC      0x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verbose output lacks %q", want)
		}
	}
	// Every diagram row is 32 bits wide: 2 characters a bit plus the border.
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  |") && len(l) != 2+1+64 {
			t.Errorf("diagram row %q is %d characters, want 67", l, len(l))
		}
	}
}

func TestDumpPSNGaps(t *testing.T) {
	out, _, err := run(t, "dump", "-q", filepath.Join(clitest.Captures, "11_read_bw_loss10_resp.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^ +\d+ \d+\.\d{6} `).MatchString(out) {
		t.Errorf("-q printed packet lines")
	}
	re := regexp.MustCompile(`QP 0x00003f requests\s+102 packets, PSN \d+\.\.\d+, (\d+) gaps \((\d+) PSNs missing\), (\d+) retransmitted`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no request flow line in:\n%s", out)
	}
	if m[1] == "0" || m[3] == "0" {
		t.Errorf("lossy capture shows no gaps or no retransmissions: %s", m[0])
	}
	// A clean capture shows none.
	out, _, err = run(t, "dump", "-q", filepath.Join(clitest.Captures, "04_write_bw_s8192.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "0 gaps (0 PSNs missing), 0 retransmitted") || strings.Contains(out, " 1 gaps") {
		t.Errorf("clean capture reports gaps:\n%s", out)
	}
}

func TestDumpFormats(t *testing.T) {
	frames := clitest.RealFrames(t, "07_send_bw_s4096.pcap", 6)
	arp := make([]byte, 42)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	// A UDP packet to port 53: not RoCE.
	dns := append([]byte(nil), frames[0][:14+20+8]...)
	binary.BigEndian.PutUint16(dns[14+20+2:], 53)
	withOther := append([][]byte{arp, dns}, frames...)

	sll := func(fr []byte) []byte { // Linux cooked v1: 16-byte header, protocol at 14
		b := make([]byte, 16+len(fr)-14)
		binary.BigEndian.PutUint16(b[14:], binary.BigEndian.Uint16(fr[12:]))
		copy(b[16:], fr[14:])
		return b
	}
	var cooked, raw [][]byte
	for _, fr := range frames {
		cooked = append(cooked, sll(fr))
		raw = append(raw, fr[14:])
	}
	for _, tc := range []struct {
		name   string
		ng     bool
		lt     layers.LinkType
		frames [][]byte
		other  int
	}{
		{"pcap ethernet with other traffic", false, layers.LinkTypeEthernet, withOther, 2},
		{"pcapng ethernet with other traffic", true, layers.LinkTypeEthernet, withOther, 2},
		{"linux cooked", false, layers.LinkTypeLinuxSLL, cooked, 0},
		{"raw ip", false, layers.LinkTypeRaw, raw, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := run(t, "dump", clitest.WriteCapture(t, tc.ng, tc.lt, tc.frames))
			if err != nil {
				t.Fatalf("dump: %v\n%s", err, out)
			}
			s := clitest.ParseSummary(t, out)
			if s.RoCE != 6 || s.OK != 6 || s.Other != tc.other {
				t.Errorf("summary %+v, want 6 RoCE ok and %d other", s, tc.other)
			}
		})
	}
}

func TestDumpBadICRCAndMalformed(t *testing.T) {
	frames := clitest.RealFrames(t, "03_write_bw_s64.pcap", 3)
	frames[1] = append([]byte(nil), frames[1]...)
	frames[1][len(frames[1])-10] ^= 0x04 // a payload bit: the ICRC no longer matches
	frames[2] = append([]byte(nil), frames[2]...)
	frames[2][14+20+8] = 0xff // BTH opcode 0xff: unknown
	out, _, err := run(t, "dump", clitest.WriteCapture(t, false, layers.LinkTypeEthernet, frames))
	if err == nil || !strings.Contains(err.Error(), "1 packets with a bad ICRC, 1 malformed") {
		t.Errorf("err = %v, want a count of bad ICRCs and malformed packets", err)
	}
	if !strings.Contains(out, "     2 ") || !strings.Contains(out, "ICRC BAD (0x") {
		t.Errorf("no ICRC BAD line for packet 2:\n%s", out)
	}
	if !strings.Contains(out, "     3 0.002000 malformed RoCE v2 packet: decode bth") {
		t.Errorf("no malformed line for packet 3:\n%s", out)
	}
}

func TestDumpDamagedFiles(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(clitest.Captures, "01_rc_pingpong.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The first record header is at 24; packet 1 is 1082 bytes + 16 of header.
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "nope.pcap"), "no such file"},
		{"empty", write("empty", nil), "not a pcap or pcapng file"},
		{"text", write("text", []byte("hello, this is not a capture\n")), "not a pcap or pcapng file"},
		{"header only", write("hdr", good[:20]), "pcap header"},
		{"cut in packet 1", write("cut1", good[:24+16+500]), "packet 1: file ends in the middle of a packet"},
		{"cut in packet 3", write("cut3", good[:24+3*(16+1082)-7]), "packet 3: file ends in the middle of a packet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, "dump", tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestDumpUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dump"}, 2, "want exactly one capture file"},
		{[]string{"dump", "-z", "x"}, 2, "flag provided but not defined: -z"},
		{[]string{"dump", "-c", "-1", "x"}, 2, "-c must be 0 or more"},
		{[]string{"dump", "a", "b"}, 2, "got 2"},
		{[]string{"dump", "-w", "out.pcap", "x.pcap"}, 2, "use it with -i"},
		{[]string{"dump", "-i", "eth0", "x.pcap"}, 2, "not both"},
		{[]string{"dump", "-i", "nosuchif0"}, 1, "no such network interface"},
	} {
		_, _, err := run(t, tc.args...)
		if base.ExitCode(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("xroce %q: err %v (exit %d), want exit %d mentioning %q", tc.args, err, base.ExitCode(err), tc.code, tc.want)
		}
	}
	_, stderr, err := run(t, "dump", "-h")
	if err != nil || !strings.Contains(stderr, "Examples:") || !strings.Contains(stderr, "-v") {
		t.Errorf("dump -h: %v\n%s", err, stderr)
	}
	// Flags after the file work too, as with tcpdump.
	out, _, err := run(t, "dump", filepath.Join(clitest.Captures, "02_ud_pingpong.pcap"), "-c", "1", "-v")
	if err != nil || !strings.Contains(out, "DETH: datagram extended transport header") {
		t.Errorf("flags after the file: %v\n%s", err, out)
	}
}
