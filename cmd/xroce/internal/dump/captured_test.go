package dump

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
)

// capturedRE reads the summary's first line with the counts that real
// captures add.
var capturedRE = regexp.MustCompile(`(?m)^(\d+) packets: (\d+) RoCE v2, (?:(\d+) RoCE v1, )?(?:(\d+) native InfiniBand \(ERF\), not decoded, )?(\d+) other \(skipped\), (\d+) malformed; ICRC: (\d+) ok, (\d+) bad(?:, (\d+) ok with the original source port)?(?:, (\d+) not captured)?$`)

// hwCounts is what dump finds in one capture.
type hwCounts struct {
	v2, v1, ib, other, malformed, ok, bad, sniffer, headerOnly, dc int
}

func parseCaptured(t *testing.T, out string) hwCounts {
	t.Helper()
	m := capturedRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line in output:\n%s", out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	c := hwCounts{v2: n(2), v1: n(3), ib: n(4), other: n(5), malformed: n(6), ok: n(7), bad: n(8), sniffer: n(9), headerOnly: n(10)}
	if dc := regexp.MustCompile(`(?m)^Mellanox DC .*: (\d+) packets$`).FindStringSubmatch(out); dc != nil {
		c.dc, _ = strconv.Atoi(dc[1])
	}
	return c
}

// TestDumpHardwareCaptures decodes every ConnectX capture of
// ../shared/pcaps-hw: nothing is malformed or bad, and each kind of frame
// is counted where it belongs.
func TestDumpHardwareCaptures(t *testing.T) {
	dir := hwCaptureDir(t)
	for name, want := range map[string]hwCounts{
		"write.pcap":                {v2: 17, ok: 17},
		"read2.pcap":                {v2: 13, ok: 13, other: 3},
		"send.pcap":                 {v2: 9, ok: 9},
		"rocev2_test.pcap":          {v2: 708, ok: 708},
		"rocev2-2_test.pcap":        {v2: 641, ok: 641},
		"rocev1_test.pcap":          {v2: 301, v1: 323, ok: 624},
		"rocev1.pcap":               {v1: 2468, ok: 2468},
		"ib_send_bw_over_roce.pcap": {v2: 10, ok: 10, other: 35},
		"nvme-rdma-25echoTo27.pcap": {v2: 45, ok: 45},
		"nvme-rdma-idle.pcap":       {v2: 4, ok: 4},
		"nvme-discover2.pcap":       {v2: 31, ok: 31},
		"nvme-discover.pcap":        {v2: 61, ok: 61, other: 4},
		"rc-small.pcap":             {v2: 21, sniffer: 21},
		"uc-sg.pcap":                {v2: 17, sniffer: 17},
		"dc-small.pcap":             {v2: 19, sniffer: 19, dc: 19},
		"dc-small2.pcap":            {v2: 29, sniffer: 29, dc: 29},
		"rdma-nccl2.pcap":           {v2: 509, other: 11, sniffer: 20, headerOnly: 489},
		"ib2.pcap":                  {ib: 127},
	} {
		t.Run(name, func(t *testing.T) {
			out, _, err := run(t, "dump", filepath.Join(dir, name))
			if err != nil {
				t.Fatalf("dump: %v", err)
			}
			if got := parseCaptured(t, out); got != want {
				t.Errorf("counts %+v, want %+v", got, want)
			}
		})
	}
}

// TestDumpSnifferPorts checks the per-flow lines naming the original ports.
func TestDumpSnifferPorts(t *testing.T) {
	dir := hwCaptureDir(t)
	for name, want := range map[string][]string{
		"rc-small.pcap":   {"10.22.116.220 > 10.22.116.221     16 packets: ICRC matches with the original UDP source port 0xd0b3: a capture from the RDMA sniffer, which rewrites it to 4791"},
		"dc-small.pcap":   {"10.22.116.220 > 10.22.116.221     12 packets: ICRC matches with the original UDP source port 0xf7fc", "10.22.116.221 > 10.22.116.220      7 packets: ICRC matches with the original UDP source port 0xd079"},
		"uc-sg.pcap":      {"source port 0xe1be"},
		"dc-small2.pcap":  {"source port 0xf018"},
		"rdma-nccl2.pcap": {"18 packets: ICRC matches with the original UDP source port 0xdaf8", "source port 0xf046"},
	} {
		out, _, err := run(t, "dump", filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q", name, w)
			}
		}
		if !strings.Contains(out, " ICRC ok with sport 0x") {
			t.Errorf("%s: no per-packet sniffer marker", name)
		}
	}
}

// TestDumpHeaderOnly cuts the frames of an rxe capture as a snap length
// does (editcap -s 100), in Go: no packet is malformed, every one is
// header-only with its headers decoded, and the exit status is 0. A cut
// inside the headers names the header the capture cut.
func TestDumpHeaderOnly(t *testing.T) {
	frames := clitest.RealFrames(t, "05_read_bw_s8192.pcap", 20)
	cut := func(n int) [][]byte {
		var out [][]byte
		for _, fr := range frames {
			out = append(out, fr[:min(n, len(fr))])
		}
		return out
	}
	out, _, err := run(t, "dump", clitest.WriteCapture(t, false, layers.LinkTypeEthernet, cut(100)))
	if err != nil {
		t.Fatalf("dump of a capture cut at 100 bytes: %v\n%s", err, out)
	}
	c := parseCaptured(t, out)
	// The READ REQUESTs are shorter than 100 bytes: whole.
	if c.malformed != 0 || c.v2 != 20 || c.ok != 3 || c.headerOnly != 17 || c.bad != 0 {
		t.Errorf("counts %+v, want 3 ok and 17 header-only", c)
	}
	for _, w := range []string{
		"     2 0.001000 198.18.0.2 > 198.18.0.1 RC RDMA_READ_RESPONSE_FIRST  QP 0x000035 PSN 12432892   AETH ACK credits=invalid msn 1 len 42 ICRC not captured\n",
		"198.18.0.1 > 198.18.0.2 QP 0x000039 requests       3 packets, PSN 12432892..12432908, 0 gaps (0 PSNs missing), 0 retransmitted\n",
		"Header-only: 17 packets cut short by the capture (snap length): their headers decoded, their ICRC not captured\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	out, _, err = run(t, "dump", "-v", "-c", "2", clitest.WriteCapture(t, false, layers.LinkTypeEthernet, cut(100)))
	if err != nil || !strings.Contains(out, "  ICRC      not captured") || !strings.Contains(out, "the packet is 1072 bytes on the wire, the capture holds 86") {
		t.Errorf("-v of a header-only frame: %v\n%s", err, out)
	}
	out, _, err = run(t, "dump", clitest.WriteCapture(t, false, layers.LinkTypeEthernet, cut(40)))
	if err != nil || !strings.Contains(out, "header-only RoCE v2 packet, cut inside its headers: decode udp at 40: cut short by the capture") {
		t.Errorf("capture cut at 40 bytes: %v\n%s", err, out)
	}
	if c := parseCaptured(t, out); c.malformed != 0 || c.headerOnly != 20 {
		t.Errorf("cut at 40: counts %+v, want 20 header-only", c)
	}
}

// TestDumpTsharkHardware compares dump's lines for every ConnectX capture
// with tshark's fields: BTH, RETH, DETH, AETH, RDETH and the ICRC as
// Wireshark prints it. Where tshark reads DC or header-only frames
// differently, the test checks the known difference instead.
func TestDumpTsharkHardware(t *testing.T) {
	dir := hwCaptureDir(t)
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed: dump not compared with it")
	}
	fields := []string{"frame.number", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.a",
		"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.deth.q_key", "infiniband.deth.srcqp",
		"infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.rdeth.eecnxt", "infiniband.invariant.crc"}
	for _, name := range []string{"write.pcap", "read2.pcap", "send.pcap", "rocev2_test.pcap", "rocev1_test.pcap", "rocev1.pcap",
		"ib_send_bw_over_roce.pcap", "nvme-rdma-25echoTo27.pcap", "nvme-rdma-idle.pcap", "nvme-discover.pcap", "nvme-discover2.pcap",
		"rc-small.pcap", "uc-sg.pcap", "dc-small.pcap", "dc-small2.pcap", "rdma-nccl2.pcap"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			out, _, err := run(t, "dump", "-v", path)
			if err != nil {
				t.Fatal(err)
			}
			packets := splitPackets(out)
			rows := 0
			for _, v := range tsharkRows(t, tshark, fields, "-r", path, "-d", "udp.port==4791,infiniband", "--disable-protocol", "rpcordma",
				"-Y", "infiniband.bth") {
				frame, _ := strconv.Atoi(v["frame.number"])
				p, ok := packets[frame]
				if !ok {
					t.Errorf("frame %d: tshark decodes a BTH, dump prints no packet", frame)
					continue
				}
				rows++
				compareTshark(t, frame, p, v)
			}
			if rows != len(packets) {
				t.Errorf("tshark decodes %d packets, dump %d", rows, len(packets))
			}
		})
	}
}

// splitPackets returns dump -v's text per packet number.
func splitPackets(out string) map[int]string {
	m := map[int]string{}
	start := regexp.MustCompile(`(?m)^ {0,5}(\d+) \d+\.\d{6} `)
	idx := start.FindAllStringSubmatchIndex(out, -1)
	for i, x := range idx {
		end := len(out)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		n, _ := strconv.Atoi(out[x[2]:x[3]])
		m[n] = out[x[0]:end]
	}
	return m
}

// compareTshark checks one packet's dump text against tshark's fields.
func compareTshark(t *testing.T, frame int, p string, v map[string]string) {
	t.Helper()
	num := func(f string) uint64 {
		n, err := strconv.ParseUint(v[f], 0, 64)
		if err != nil {
			t.Fatalf("frame %d: tshark %s = %q", frame, f, v[f])
		}
		return n
	}
	line, _, _ := strings.Cut(p, "\n")
	want := []string{fmt.Sprintf("QP 0x%06x PSN %-8d %s", num("infiniband.bth.destqp"), num("infiniband.bth.psn"),
		map[string]string{"0": " ", "1": "A"}[v["infiniband.bth.a"]])}
	want = append(want, fmt.Sprintf("opcode 0x%02x = ", num("infiniband.bth.opcode")))
	if v["infiniband.reth.va"] != "" {
		want = append(want, fmt.Sprintf(" RETH va 0x%x rkey 0x%08x dlen %d", num("infiniband.reth.va"), num("infiniband.reth.r_key"), num("infiniband.reth.dmalen")))
	}
	if v["infiniband.deth.q_key"] != "" {
		want = append(want, fmt.Sprintf(" DETH qkey 0x%08x srcqp 0x%06x", num("infiniband.deth.q_key"), num("infiniband.deth.srcqp")))
	}
	if v["infiniband.rdeth.eecnxt"] != "" {
		want = append(want, fmt.Sprintf(" RDETH eec 0x%06x", num("infiniband.rdeth.eecnxt")))
	}
	dc := strings.Contains(line, " DC ")
	if v["infiniband.aeth.syndrome"] != "" {
		if dc {
			// tshark reads a DC ACK's AETH where the RDETH is; dump
			// reads the AETH after the RDETH and DETH.
			want = append(want, fmt.Sprintf(" RDETH eec 0x%06x", num("infiniband.aeth.msn")))
		} else {
			want = append(want, fmt.Sprintf(" msn %d", num("infiniband.aeth.msn")))
		}
	}
	switch crc := v["infiniband.invariant.crc"]; {
	case strings.Contains(line, "ICRC not captured"):
		// tshark shows the last four captured bytes as the ICRC of a
		// header-only frame; there is none.
	case crc != "":
		want = append(want, fmt.Sprintf("  ICRC      0x%08x (ok", num("infiniband.invariant.crc")))
	case !dc:
		t.Errorf("frame %d: tshark shows no ICRC", frame)
	}
	for _, w := range want {
		if !strings.Contains(p, w) {
			t.Errorf("frame %d: dump lacks %q (tshark's fields):\n%s", frame, w, line)
		}
	}
}
