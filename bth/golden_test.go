package bth

import (
	"bufio"
	"encoding/hex"
	"flag"
	"fmt"
	"hash/crc32"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update-golden", false, "regenerate testdata/tshark_golden.txt with tshark")

const goldenFile = "testdata/tshark_golden.txt"

// A goldenField is one column of the golden file: a tshark field and how to
// read the same value from a decoded Frame (ok false: the frame has no such
// field, so tshark must print nothing).
type goldenField struct {
	tshark string
	ours   func(f *Frame) (v string, ok bool)
}

func num(v uint64) (string, bool)   { return strconv.FormatUint(v, 10), true }
func flagv(v bool) (string, bool)   { return map[bool]string{false: "0", true: "1"}[v], true }
func absent() (string, bool)        { return "", false }
func payloadCRC(p []byte) uint32    { return crc32.ChecksumIEEE(p) }
func tsharkOK() (string, bool)      { p, err := exec.LookPath("tshark"); return p, err == nil }
func hexPayloadCRC(s string) string { b, _ := hex.DecodeString(s); return num32(payloadCRC(b)) }
func num32(v uint32) string         { return strconv.FormatUint(uint64(v), 10) }

var goldenFields = []goldenField{
	{"eth.src", func(f *Frame) (string, bool) { return f.SrcMAC().String(), true }},
	{"eth.dst", func(f *Frame) (string, bool) { return f.DstMAC().String(), true }},
	{"vlan.id", func(f *Frame) (string, bool) {
		if f.VLAN == nil {
			return absent()
		}
		return num(uint64(f.VLAN.ID()))
	}},
	{"vlan.priority", func(f *Frame) (string, bool) {
		if f.VLAN == nil {
			return absent()
		}
		return num(uint64(f.VLAN.PCP()))
	}},
	{"ip.src", func(f *Frame) (string, bool) {
		if f.IPv4 == nil {
			return absent()
		}
		return f.SrcIP().String(), true
	}},
	{"ip.dst", func(f *Frame) (string, bool) {
		if f.IPv4 == nil {
			return absent()
		}
		return f.DstIP().String(), true
	}},
	{"ipv6.src", func(f *Frame) (string, bool) {
		if f.IPv6 == nil {
			return absent()
		}
		return f.SrcIP().String(), true
	}},
	{"ipv6.dst", func(f *Frame) (string, bool) {
		if f.IPv6 == nil {
			return absent()
		}
		return f.DstIP().String(), true
	}},
	{"ipv6.tclass", func(f *Frame) (string, bool) {
		if f.IPv6 == nil {
			return absent()
		}
		return num(uint64(f.IPv6.TrafficClass()))
	}},
	{"ipv6.flow", func(f *Frame) (string, bool) {
		if f.IPv6 == nil {
			return absent()
		}
		return num(uint64(f.IPv6.FlowLabel()))
	}},
	{"ipv6.hlim", func(f *Frame) (string, bool) {
		if f.IPv6 == nil {
			return absent()
		}
		return num(uint64(f.IPv6.HopLimit()))
	}},
	{"ip.id", func(f *Frame) (string, bool) {
		if f.IPv4 == nil {
			return absent()
		}
		return num(uint64(f.IPv4.ID()))
	}},
	{"ip.ttl", func(f *Frame) (string, bool) {
		if f.IPv4 == nil {
			return absent()
		}
		return num(uint64(f.IPv4.TTL()))
	}},
	{"ip.dsfield", func(f *Frame) (string, bool) {
		if f.IPv4 == nil {
			return absent()
		}
		return num(uint64(f.IPv4.TOS()))
	}},
	{"udp.srcport", func(f *Frame) (string, bool) { return num(uint64(f.UDP.SrcPort())) }},
	{"udp.length", func(f *Frame) (string, bool) { return num(uint64(f.UDP.Length())) }},
	{"infiniband.bth.opcode", func(f *Frame) (string, bool) { return num(uint64(f.BTH.Opcode())) }},
	{"infiniband.bth.se", func(f *Frame) (string, bool) { return flagv(f.BTH.SE()) }},
	{"infiniband.bth.m", func(f *Frame) (string, bool) { return flagv(f.BTH.MigReq()) }},
	{"infiniband.bth.padcnt", func(f *Frame) (string, bool) { return num(uint64(f.BTH.PadCnt())) }},
	{"infiniband.bth.tver", func(f *Frame) (string, bool) { return num(uint64(f.BTH.TVer())) }},
	{"infiniband.bth.p_key", func(f *Frame) (string, bool) { return num(uint64(f.BTH.PKey())) }},
	{"infiniband.bth.destqp", func(f *Frame) (string, bool) { return num(uint64(f.BTH.DestQP())) }},
	{"infiniband.bth.a", func(f *Frame) (string, bool) { return flagv(f.BTH.AckReq()) }},
	{"infiniband.bth.psn", func(f *Frame) (string, bool) { return num(uint64(f.BTH.PSN())) }},
	{"infiniband.deth.q_key", func(f *Frame) (string, bool) {
		if f.DETH == nil {
			return absent()
		}
		return num(uint64(f.DETH.QKey()))
	}},
	{"infiniband.deth.srcqp", func(f *Frame) (string, bool) {
		if f.DETH == nil {
			return absent()
		}
		return num(uint64(f.DETH.SrcQP()))
	}},
	// Wireshark shows the AtomicETH's address and key with the RETH fields.
	{"infiniband.reth.va", func(f *Frame) (string, bool) {
		switch {
		case f.RETH != nil:
			return num(f.RETH.VA())
		case f.AtomicETH != nil:
			return num(f.AtomicETH.VA())
		}
		return absent()
	}},
	{"infiniband.reth.r_key", func(f *Frame) (string, bool) {
		switch {
		case f.RETH != nil:
			return num(uint64(f.RETH.RKey()))
		case f.AtomicETH != nil:
			return num(uint64(f.AtomicETH.RKey()))
		}
		return absent()
	}},
	{"infiniband.reth.dmalen", func(f *Frame) (string, bool) {
		if f.RETH == nil {
			return absent()
		}
		return num(uint64(f.RETH.DMALen()))
	}},
	{"infiniband.atomiceth.swapdt", func(f *Frame) (string, bool) {
		if f.AtomicETH == nil {
			return absent()
		}
		return num(f.AtomicETH.SwapAdd())
	}},
	{"infiniband.atomiceth.cmpdt", func(f *Frame) (string, bool) {
		if f.AtomicETH == nil {
			return absent()
		}
		return num(f.AtomicETH.Compare())
	}},
	{"infiniband.aeth.syndrome", func(f *Frame) (string, bool) {
		if f.AETH == nil {
			return absent()
		}
		return num(uint64(f.AETH.Syndrome()))
	}},
	{"infiniband.aeth.msn", func(f *Frame) (string, bool) {
		if f.AETH == nil {
			return absent()
		}
		return num(uint64(f.AETH.MSN()))
	}},
	{"infiniband.atomicacketh.origremdt", func(f *Frame) (string, bool) {
		if f.AtomicAckETH == nil {
			return absent()
		}
		return num(f.AtomicAckETH.OrigRemoteData())
	}},
	{"infiniband.immdt", func(f *Frame) (string, bool) {
		if f.ImmDt == nil {
			return absent()
		}
		return num(uint64(f.ImmDt.Imm()))
	}},
	{"infiniband.ieth", func(f *Frame) (string, bool) {
		if f.IETH == nil {
			return absent()
		}
		return num(uint64(f.IETH.RKey()))
	}},
	// Wireshark reads the ICRC as a big-endian word; it is stored little-endian.
	{"infiniband.invariant.crc", func(f *Frame) (string, bool) { return num(uint64(bits.ReverseBytes32(f.ICRC))) }},
	// Payload bytes as Wireshark's data dissector sees them (payload and
	// pad): length and CRC-32. Management datagrams (QP1) are dissected as
	// MADs, not data.
	{"data.len", func(f *Frame) (string, bool) {
		if len(f.Payload) == 0 || f.BTH.DestQP() == 1 {
			return absent()
		}
		return num(uint64(len(payloadAndPad(f))))
	}},
	{"data.data", func(f *Frame) (string, bool) {
		if len(f.Payload) == 0 || f.BTH.DestQP() == 1 {
			return absent()
		}
		return num32(payloadCRC(payloadAndPad(f))), true
	}},
}

func payloadAndPad(f *Frame) []byte {
	end := len(f.pkt) - ICRCSize
	return f.pkt[end-f.PadLen-len(f.Payload) : end]
}

// tsharkFields runs tshark on a pcap and returns, per frame, the values of
// goldenFields (data.data replaced by the CRC-32 of the bytes) plus the
// expert and malformed columns.
func tsharkFields(t *testing.T, tshark, pcap string) [][]string {
	t.Helper()
	// RPC-over-RDMA's heuristic dissector claims small SEND payloads and
	// reports them malformed; it is not part of RoCE.
	args := []string{"-r", pcap, "-d", "udp.port==4791,infiniband", "--disable-protocol", "rpcordma", "-T", "fields", "-E", "separator=|", "-E", "occurrence=f",
		"-e", "frame.number"}
	for _, g := range goldenFields {
		args = append(args, "-e", g.tshark)
	}
	args = append(args, "-e", "_ws.expert", "-e", "_ws.malformed")
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", pcap, err)
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) != len(goldenFields)+3 {
			t.Fatalf("tshark %s: %d columns in %q", pcap, len(cols), line)
		}
		for i, g := range goldenFields {
			v := cols[i+1]
			switch {
			case v == "":
			case g.tshark == "data.data":
				v = hexPayloadCRC(v)
			case g.tshark == "infiniband.immdt", g.tshark == "infiniband.ieth": // shown as bytes
				n, err := strconv.ParseUint(strings.ReplaceAll(v, ":", ""), 16, 32)
				if err != nil {
					t.Fatalf("tshark %s: field %s = %q: %v", pcap, g.tshark, v, err)
				}
				v = strconv.FormatUint(n, 10)
			case strings.HasSuffix(g.tshark, ".src"), strings.HasSuffix(g.tshark, ".dst"):
			default:
				n, err := strconv.ParseUint(v, 0, 64)
				if err != nil {
					t.Fatalf("tshark %s: field %s = %q: %v", pcap, g.tshark, v, err)
				}
				v = strconv.FormatUint(n, 10)
			}
			cols[i+1] = v
		}
		rows = append(rows, cols)
	}
	return rows
}

// compareFrame checks a decoded frame against one row of tshark values.
func compareFrame(t *testing.T, where string, f *Frame, row []string) {
	t.Helper()
	for i, g := range goldenFields {
		want := row[i]
		got, ok := g.ours(f)
		if !ok {
			got = ""
		}
		if got != want {
			t.Errorf("%s: %s = %q, tshark says %q", where, g.tshark, got, want)
		}
	}
}

// TestGoldenTshark checks every frame of every capture against the field
// values tshark printed for it (testdata/tshark_golden.txt, made by running
// this test with -update-golden).
func TestGoldenTshark(t *testing.T) {
	if *updateGolden {
		tshark, ok := tsharkOK()
		if !ok {
			t.Fatal("-update-golden needs tshark")
		}
		var sb strings.Builder
		sb.WriteString("# file|frame|" + strings.Join(func() (s []string) {
			for _, g := range goldenFields {
				s = append(s, g.tshark)
			}
			return
		}(), "|") + "\n")
		sb.WriteString("# made by: go test ./bth -run TestGoldenTshark -update-golden (tshark -d udp.port==4791,infiniband -T fields)\n")
		for _, name := range pcapNames(t) {
			for _, cols := range tsharkFields(t, tshark, filepath.Join("testdata", name)) {
				if cols[len(cols)-2] != "" || cols[len(cols)-1] != "" {
					t.Errorf("%s frame %s: tshark expert %q malformed %q", name, cols[0], cols[len(cols)-2], cols[len(cols)-1])
				}
				sb.WriteString(name + "|" + strings.Join(cols[:len(cols)-2], "|") + "\n")
			}
		}
		if err := os.WriteFile(goldenFile, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fh, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	frames := map[string][][]byte{}
	seen := map[string]int{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) != len(goldenFields)+2 {
			t.Fatalf("golden: %d columns in %q", len(cols), line)
		}
		name := cols[0]
		if frames[name] == nil {
			frames[name] = readPcap(t, name)
		}
		n, err := strconv.Atoi(cols[1])
		if err != nil || n < 1 || n > len(frames[name]) {
			t.Fatalf("golden: bad frame number in %q", line)
		}
		seen[name]++
		where := fmt.Sprintf("%s #%d", name, n)
		var f Frame
		if err := f.Decode(frames[name][n-1]); err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if !f.VerifyICRC() {
			t.Errorf("%s: ICRC %#x, computed %#x", where, f.ICRC, f.ComputeICRC())
		}
		compareFrame(t, where, &f, cols[2:])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, name := range pcapNames(t) {
		if frames[name] == nil {
			frames[name] = readPcap(t, name)
		}
		if seen[name] != len(frames[name]) {
			t.Errorf("%s: golden file covers %d of %d frames", name, seen[name], len(frames[name]))
		}
		total += seen[name]
	}
	if !t.Failed() {
		t.Logf("%d frames match tshark", total)
	}
}
