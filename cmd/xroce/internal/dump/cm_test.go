package dump

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/mad"
)

// TestDumpCM decodes the CM exchange of the rxe rping capture. Values read
// with tshark -d udp.port==4791,infiniband -V.
func TestDumpCM(t *testing.T) {
	out, _, err := run(t, "dump", filepath.Join(clitest.Captures, "09_rping_rdmacm.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"     1 0.000000 198.18.0.1 > 198.18.0.2 UD SEND_ONLY                 QP 0x000001 PSN 3        A DETH qkey 0x80010000 srcqp 0x000001 len 256 ICRC ok\n" +
			"  CM REQ tid 0x00000008bd89c867 comm 0x67c889bd svc TCP:7174 qpn 0x000039 psn 0xce3d5f mtu 1024 rr/id 1/1 retry 7 rnr 7 cma 198.18.0.1:43081 -> 198.18.0.2 pdata 36/92 (to last nonzero byte)\n",
		"  CM REP tid 0x00000008bd89c867 comm 0x78c889bd remote 0x67c889bd qpn 0x00003d psn 0x2d66fc rr/id 1/1 ackdelay 15 rnr 7 pdata 0/196 (to last nonzero byte)\n" +
			"     3 0.019335 ",
		"  CM RTU tid 0x00000008bd89c867 comm 0x67c889bd remote 0x78c889bd pdata 0/224 (to last nonzero byte)\n",
		"  CM DREQ tid 0x00000008bd89c867 comm 0x67c889bd remote 0x78c889bd qpn 0x00003d pdata 0/220 (to last nonzero byte)\n",
		"  CM DREP tid 0x00000008bd89c867 comm 0x78c889bd remote 0x67c889bd pdata 0/224 (to last nonzero byte)\n",
		"\nManagement datagrams to QP 1: 1 REQ, 1 REP, 1 RTU, 1 DREQ, 1 DREP\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks\n%s\ngot:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n  CM "); n != 5 {
		t.Errorf("%d CM lines, want 5", n)
	}
	// -q keeps the count, without the lines.
	out, _, err = run(t, "dump", "-q", filepath.Join(clitest.Captures, "09_rping_rdmacm.pcap"))
	if err != nil || strings.Contains(out, "  CM ") || !strings.Contains(out, "Management datagrams to QP 1: 1 REQ,") {
		t.Errorf("-q: %v\n%s", err, out)
	}
}

func TestDumpCMVerbose(t *testing.T) {
	out, _, err := run(t, "dump", "-v", "-c", "3", filepath.Join(clitest.Captures, "09_rping_rdmacm.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"MAD: common management datagram header, 24 bytes (class 0x07, attribute REQ)",
		"|                TransactionID[31:0] 0xbd89c867                 |",
		"  CM REQ\n    LocalCommID 0x67c889bd ",
		"PrimaryLocalGID ::ffff:198.18.0.1  PrimaryRemoteGID ::ffff:198.18.0.2",
		"PrimaryFlowLabel 0x47cdd  PrimaryPacketRate 0 ",
		"rdma_cm header: version 0  IP version 4  source 198.18.0.1:43081  destination 198.18.0.2\n",
		"PrivateData: 92 bytes, 36 up to the last nonzero byte\n      00000000  00 40 a8 49 ",
		"  CM REP\n",
		"InitiatorDepth 1  TargetACKDelay 15",
		"PrivateData: 224 bytes, 0 up to the last nonzero byte\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verbose output lacks %q", want)
		}
	}
}

// hwCaptureDir returns ../shared/pcaps-hw beside the repository, or skips.
func hwCaptureDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(dir) == dir {
			t.Skip("no go.mod above the test: cannot find ../shared/pcaps-hw")
		}
		dir = filepath.Dir(dir)
	}
	hw := filepath.Join(dir, "..", "shared", "pcaps-hw")
	if _, err := os.Stat(filepath.Join(hw, "write.pcap")); err != nil {
		t.Skipf("hardware captures (kept outside the repository) not found: %v", err)
	}
	return hw
}

// TestDumpCMHardware decodes the CM exchanges ConnectX adapters made; with
// tshark installed, each CM line is checked against what tshark reads.
func TestDumpCMHardware(t *testing.T) {
	dir := hwCaptureDir(t)
	tshark, tsErr := exec.LookPath("tshark")
	for _, name := range []string{"write.pcap", "read2.pcap", "send.pcap", "nvme-discover.pcap", "nvme-discover2.pcap"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			out, _, err := run(t, "dump", path)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(out, "\n  CM "); n != 5 {
				t.Errorf("%d CM lines, want 5", n)
			}
			if !strings.Contains(out, "Management datagrams to QP 1: 1 REQ, 1 REP, 1 RTU, 1 DREQ, 1 DREP\n") {
				t.Errorf("no CM summary:\n%s", out)
			}
			if tsErr != nil {
				t.Skip("tshark not installed: CM lines not compared")
			}
			for frame, want := range tsharkCMLines(t, tshark, path) {
				line := cmLineOf(out, frame)
				for _, w := range want {
					if !strings.Contains(line, w) {
						t.Errorf("frame %d: CM line %q lacks %q", frame, line, w)
					}
				}
			}
		})
	}
}

// tsharkCMLines returns, per CM frame, pieces its CM line must hold, made
// from tshark's fields.
func tsharkCMLines(t *testing.T, tshark, path string) map[int][]string {
	t.Helper()
	fields := []string{"frame.number", "infiniband.mad.transactionid", "infiniband.mad.attributeid",
		"infiniband.cm.req", "infiniband.cm.req.serviceid.dport", "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn",
		"infiniband.cm.req.responderres", "infiniband.cm.req.initdepth",
		"infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.sport", "infiniband.cm.req.ip_cm.dip4",
		"infiniband.cm.rep", "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn", "infiniband.cm.rep.startpsn",
		"infiniband.cm.rep.tgtackdelay",
		"infiniband.cm.rtu.localcommid", "infiniband.cm.dreq.localcommid", "infiniband.cm.req.remoteqpneecn",
		"infiniband.cm.drsp.localcommid"}
	args := []string{"-r", path, "-d", "udp.port==4791,infiniband", "-Y", "infiniband.mad", "-T", "fields",
		"-E", "separator=|", "-E", "occurrence=f"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	raw, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	n := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("tshark value %q: %v", s, err)
		}
		return v
	}
	lines := map[int][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		c := strings.Split(l, "|")
		v := map[string]string{}
		for i, f := range fields {
			v[f] = c[i]
		}
		frame := int(n(v["frame.number"]))
		attr := mad.AttrID(n(v["infiniband.mad.attributeid"]))
		want := []string{fmt.Sprintf("CM %s tid 0x%016x ", attr, n(v["infiniband.mad.transactionid"]))}
		comm := func(f string) string { return fmt.Sprintf(" comm 0x%08x ", n(v[f])) }
		switch attr {
		case mad.AttrREQ:
			want = append(want, comm("infiniband.cm.req"),
				fmt.Sprintf(" svc TCP:%d ", n(v["infiniband.cm.req.serviceid.dport"])),
				fmt.Sprintf(" qpn 0x%06x psn 0x%06x ", n(v["infiniband.cm.req.localqpn"]), n(v["infiniband.cm.req.startpsn"])),
				fmt.Sprintf(" rr/id %d/%d ", n(v["infiniband.cm.req.responderres"]), n(v["infiniband.cm.req.initdepth"])),
				fmt.Sprintf(" cma %s:%d -> %s ", v["infiniband.cm.req.ip_cm.sip4"], n(v["infiniband.cm.req.ip_cm.sport"]), v["infiniband.cm.req.ip_cm.dip4"]))
		case mad.AttrREP:
			want = append(want, comm("infiniband.cm.rep"),
				fmt.Sprintf(" remote 0x%08x qpn 0x%06x psn 0x%06x ", n(v["infiniband.cm.rep.remotecommid"]),
					n(v["infiniband.cm.rep.localqpn"]), n(v["infiniband.cm.rep.startpsn"])),
				fmt.Sprintf(" ackdelay %d ", n(v["infiniband.cm.rep.tgtackdelay"])))
		case mad.AttrRTU:
			want = append(want, comm("infiniband.cm.rtu.localcommid"))
		case mad.AttrDREQ:
			want = append(want, comm("infiniband.cm.dreq.localcommid"), fmt.Sprintf(" qpn 0x%06x ", n(v["infiniband.cm.req.remoteqpneecn"])))
		case mad.AttrDREP:
			want = append(want, comm("infiniband.cm.drsp.localcommid"))
		default:
			t.Fatalf("frame %d: unexpected attribute %v", frame, attr)
		}
		lines[frame] = want
	}
	if len(lines) != 5 {
		t.Fatalf("tshark finds %d MADs, want 5", len(lines))
	}
	return lines
}

// cmLineOf returns the CM line printed under a frame's line.
func cmLineOf(out string, frame int) string {
	prefix := fmt.Sprintf("%6d ", frame)
	ls := strings.Split(out, "\n")
	for i, l := range ls {
		if strings.HasPrefix(l, prefix) && i+1 < len(ls) {
			return ls[i+1] + " "
		}
	}
	return ""
}

// gsiFrame builds a UD SEND_ONLY to QP 1 around payload.
func gsiFrame(t *testing.T, qkey uint32, payload []byte) []byte {
	t.Helper()
	ff := bth.FrameFields{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2"), TTL: 64, SrcPort: 0xd872,
		BTH:  bth.BTHFields{Opcode: bth.UDSendOnly, PKey: 0xffff, DestQP: 1, AckReq: true},
		DETH: bth.DETHFields{QKey: qkey, SrcQP: 1},
	}
	buf := make([]byte, ff.FrameLen(len(payload)))
	n, err := bth.Build(buf, &ff, payload)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// cmMAD returns a CM MAD whose body enc fills.
func cmMAD(attr mad.AttrID, enc func(body []byte)) []byte {
	m := make(mad.MAD, mad.Size)
	m.EncodeCM(0x0000000b2975ef71, attr, 0)
	enc(m.Body())
	return m
}

// TestDumpCMMessages prints the messages that the captures lack, and MADs
// that are not CM messages or not MADs at all: each gets a line, none a
// panic, and the frames stay good RoCE frames.
func TestDumpCMMessages(t *testing.T) {
	sidrHdr := make([]byte, mad.CMAHeaderSize)
	mad.CMAHeader(sidrHdr).Encode(netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), 41234)
	badClass := cmMAD(mad.AttrREQ, func([]byte) {})
	badClass[1] = 0x03
	badCMA := cmMAD(mad.AttrREQ, func(b []byte) {
		mad.REQ(b).Encode(&mad.REQFields{ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7471), PrivateData: []byte{1, 0x40}})
	})
	for _, tc := range []struct {
		name    string
		qkey    uint32
		payload []byte
		want    string
	}{
		{"REJ", mad.GSIQKey, cmMAD(mad.AttrREJ, func(b []byte) {
			mad.REJ(b).Encode(&mad.REJFields{RemoteCommID: 0x67c889bd, MsgRejected: mad.MsgREQ, Reason: mad.RejConsumerDefined, PrivateData: []byte("busy")})
		}), "  CM REJ tid 0x0000000b2975ef71 comm 0x00000000 remote 0x67c889bd rejects REQ reason 28 (consumer defined) ari 0 pdata 4/148 (to last nonzero byte)\n"},
		{"REJ timeout", mad.GSIQKey, cmMAD(mad.AttrREJ, func(b []byte) {
			mad.REJ(b).Encode(&mad.REJFields{LocalCommID: 1, RemoteCommID: 2, MsgRejected: mad.MsgREP, Reason: mad.RejTimeout, ARI: make([]byte, 8)})
		}), " rejects REP reason 4 (timeout) ari 8 pdata 0/148"},
		{"MRA", mad.GSIQKey, cmMAD(mad.AttrMRA, func(b []byte) {
			mad.MRA(b).Encode(&mad.MRAFields{LocalCommID: 1, RemoteCommID: 2, MsgMRAed: mad.MsgREQ, ServiceTimeout: 24})
		}), "  CM MRA tid 0x0000000b2975ef71 comm 0x00000001 remote 0x00000002 for REQ service timeout 24 (68.7s) pdata 0/222 (to last nonzero byte)\n"},
		{"SIDR_REQ", mad.GSIQKey, cmMAD(mad.AttrSIDRREQ, func(b []byte) {
			mad.SIDRREQ(b).Encode(&mad.SIDRREQFields{RequestID: 9, PKey: 0xffff, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 7174), PrivateData: sidrHdr})
		}), "  CM SIDR_REQ tid 0x0000000b2975ef71 request 0x00000009 svc UDP:7174 pkey 0xffff cma [fd00::1]:41234 -> fd00::2 pdata 36/216 (to last nonzero byte)\n"},
		{"SIDR_REP", mad.GSIQKey, cmMAD(mad.AttrSIDRREP, func(b []byte) {
			mad.SIDRREP(b).Encode(&mad.SIDRREPFields{RequestID: 9, QPN: 0x12, QKey: mad.RDMAUDPQKey, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 7174)})
		}), "  CM SIDR_REP tid 0x0000000b2975ef71 request 0x00000009 status 0 (valid) qpn 0x000012 qkey 0x01234567 svc UDP:7174 pdata 0/136 (to last nonzero byte)\n"},
		{"REQ with a foreign service ID", mad.GSIQKey, cmMAD(mad.AttrREQ, func(b []byte) {
			mad.REQ(b).Encode(&mad.REQFields{ServiceID: 0x1000000000000001, PathMTU: 9})
		}), " svc 0x1000000000000001 qpn 0x000000 psn 0x000000 mtu ?(9) rr/id 0/0 retry 0 rnr 0 pdata 0/92"},
		{"REQ with a bad rdma_cm header", mad.GSIQKey, badCMA, " svc TCP:7471 qpn 0x000000 psn 0x000000 mtu ?(0) rr/id 0/0 retry 0 rnr 0 cma bad (version 1: mad: rdma_cm header version is not 0) pdata 2/92"},
		{"LAP", mad.GSIQKey, cmMAD(mad.AttrLAP, func([]byte) {}), "  CM LAP tid 0x0000000b2975ef71 (not decoded)\n"},
		{"not CM", mad.GSIQKey, badClass, "  MAD class 0x03 version 2 method 0x03 attr 0x0010 tid 0x0000000b2975ef71: not a CM message (management class 0x03, want 0x07: mad: not a Communication Management MAD)\n"},
		{"short", mad.GSIQKey, make([]byte, 200), "  MAD malformed: 200 bytes, a MAD has 256\n"},
		{"empty", mad.GSIQKey, nil, "  MAD malformed: 0 bytes, a MAD has 256\n"},
		{"wrong Q_Key", 0x12345678, cmMAD(mad.AttrDREP, func(b []byte) { mad.DREP(b).Encode(&mad.DREPFields{LocalCommID: 1}) }),
			"  QP 1 packet with Q_Key 0x12345678, not the GSI's 0x80010000: receivers drop it\n  CM DREP tid 0x0000000b2975ef71 comm 0x00000001 remote 0x00000000 pdata 0/224"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := clitest.WriteCapture(t, false, layers.LinkTypeEthernet, [][]byte{gsiFrame(t, tc.qkey, tc.payload)})
			for _, args := range [][]string{{"dump", path}, {"dump", "-v", "-x", path}} {
				out, _, err := run(t, args...)
				if err != nil {
					t.Fatalf("%v: %v\n%s", args, err, out)
				}
				if !strings.Contains(out, tc.want) {
					t.Errorf("%v: output lacks\n%s\ngot:\n%s", args, tc.want, out)
				}
			}
		})
	}
	// The summary counts what is not a CM message.
	frames := [][]byte{gsiFrame(t, mad.GSIQKey, make([]byte, 8)), gsiFrame(t, mad.GSIQKey, badClass),
		gsiFrame(t, mad.GSIQKey, cmMAD(mad.AttrRTU, func([]byte) {}))}
	out, _, err := run(t, "dump", "-q", clitest.WriteCapture(t, false, layers.LinkTypeEthernet, frames))
	if err != nil || !strings.Contains(out, "Management datagrams to QP 1: 1 RTU, 1 other MADs, 1 malformed MADs\n") {
		t.Errorf("summary: %v\n%s", err, out)
	}
}
