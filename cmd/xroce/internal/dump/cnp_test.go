//go:build linux

package dump

import (
	"bytes"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/qp"
)

// cnpOut is a qp.Output that keeps what an engine sends.
type cnpOut struct{ q [][]byte }

func (o *cnpOut) Alloc() []byte       { return make([]byte, qp.MaxFrameLen(qp.MTU1024)) }
func (o *cnpOut) Send(b []byte)       { o.q = append(o.q, b) }
func (o *cnpOut) take() [][]byte      { q := o.q; o.q = nil; return q }
func (cnpMem) Invalidate(uint32) bool { return false }

// cnpMem is one 64 KiB region under key 1, for both sides.
type cnpMem []byte

func (m cnpMem) Local(_ uint32, a uint64, n uint32, _ qp.Access) ([]byte, bool) {
	return m.get(a, n)
}

func (m cnpMem) Remote(_ uint32, a uint64, n uint32, _ qp.Access) ([]byte, bool) {
	return m.get(a, n)
}

func (m cnpMem) get(a uint64, n uint32) ([]byte, bool) {
	if a+uint64(n) > uint64(len(m)) {
		return nil, false
	}
	return m[a : a+uint64(n)], true
}

type cnpCQ struct{ n int }

func (c *cnpCQ) Complete(*qp.WC) { c.n++ }

// cnpCapture runs an RC WRITE of 64 KiB between two xroce engines whose
// data frames a switch marked CE on the way, over IPv4 and over IPv6:
// the receiver answers with CNPs (one per 4 µs, the frames 2 µs apart).
// It returns every frame both sent, in order, and how many were CNPs.
func cnpCapture(t *testing.T) (frames [][]byte, cnps int) {
	t.Helper()
	for _, ips := range [][2]netip.Addr{
		{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")},
		{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")},
	} {
		var out [2]*cnpOut
		var e [2]*qp.Engine
		var q [2]*qp.QP
		macs := [2][6]byte{{2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}}
		for i := range 2 {
			out[i] = &cnpOut{}
			var err error
			if e[i], err = qp.NewEngine(qp.EngineConfig{Out: out[i], LocalIPs: []netip.Addr{ips[i]}}); err != nil {
				t.Fatal(err)
			}
			if q[i], err = e[i].CreateQP(qp.Config{Type: qp.RC, QPN: uint32(0x100 + i), SendCQ: &cnpCQ{}, RecvCQ: &cnpCQ{},
				Mem: make(cnpMem, 64<<10)}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 {
			av := qp.AddressVector{SrcMAC: macs[i], DstMAC: macs[1-i], SrcIP: ips[i], DstIP: ips[1-i], HopLimit: 64}
			for _, s := range []struct {
				a qp.Attr
				m qp.AttrMask
			}{
				{qp.Attr{State: qp.StateInit, PKey: 0xffff, Port: 1, AccessFlags: qp.AccessRemoteWrite}, qp.AttrPKey | qp.AttrPort | qp.AttrAccessFlags},
				{qp.Attr{State: qp.StateRTR, AV: av, PathMTU: qp.MTU1024, DestQPN: q[1-i].QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 1},
					qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
				{qp.Attr{State: qp.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
					qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic},
			} {
				if err := q[i].Modify(&s.a, qp.AttrState|s.m); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := q[0].PostSend(&qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Length: 64 << 10, LKey: 1}}, RKey: 1}); err != nil {
			t.Fatal(err)
		}
		// Frames go one at a time, 2 µs apart, in the order they were
		// sent; what a frame makes the other side send queues behind.
		type sent struct {
			from int
			b    []byte
		}
		now := time.Duration(0)
		e[0].Poll(now)
		var queue []sent
		for _, b := range out[0].take() {
			queue = append(queue, sent{0, b})
		}
		for len(queue) > 0 && len(frames) < 1000 {
			x := queue[0]
			queue = queue[1:]
			if x.from == 0 && !bth.MarkCE(x.b) {
				t.Fatal("a data frame is not ECN-capable")
			}
			frames = append(frames, x.b)
			to := 1 - x.from
			e[to].Input([][]byte{x.b}, now)
			e[to].Poll(now)
			for _, b := range out[to].take() {
				queue = append(queue, sent{to, b})
			}
			now += 2 * time.Microsecond
		}
		cnps += int(e[1].Stats().TxCNP.Load())
	}
	return frames, cnps
}

// tsharkRows runs tshark with args and prints fields of each packet it
// shows: one map from field name to value per packet (the first
// occurrence of each field).
func tsharkRows(t *testing.T, tshark string, fields []string, args ...string) []map[string]string {
	t.Helper()
	args = append(args, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f")
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	raw, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark %q: %v", args, err)
	}
	var rows []map[string]string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if l == "" {
			continue
		}
		v := map[string]string{}
		for i, c := range strings.Split(l, "|") {
			if i < len(fields) {
				v[fields[i]] = c
			}
		}
		rows = append(rows, v)
	}
	return rows
}

// TestDumpCNP: xroce dump and tshark decode every CNP xroce sends (over
// IPv4 and IPv6), and every CE-marked data frame before them.
func TestDumpCNP(t *testing.T) {
	frames, cnps := cnpCapture(t)
	if cnps < 10 {
		t.Fatalf("%d CNPs in the capture, want a dozen or more", cnps)
	}
	path := clitest.WriteCapture(t, false, layers.LinkTypeEthernet, frames)
	out, _, err := run(t, "dump", "-v", path)
	if err != nil {
		t.Fatalf("dump: %v\n%s", err, out)
	}
	packets := splitPackets(out)
	seen := 0
	var f bth.Frame
	for i, b := range frames {
		if err := f.Decode(b); err != nil {
			t.Fatal(err)
		}
		p := packets[i+1]
		if f.Opcode() != bth.OpCNP {
			if i == 0 && !strings.Contains(p, "ECN CE") {
				t.Errorf("frame 1, CE-marked data: dump says nothing of it:\n%s", p)
			}
			continue
		}
		seen++
		for _, want := range []string{"CNP", "QP 0x000100", " BECN len 0 ICRC ok", "(dscp 48 ecn 2 ECT(0))"} {
			if !strings.Contains(p, want) {
				t.Errorf("frame %d, a CNP: dump lacks %q:\n%s", i+1, want, p)
			}
		}
	}
	if seen != cnps || !strings.Contains(out, "CNP") {
		t.Errorf("dump showed %d CNPs of %d", seen, cnps)
	}

	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (make deps installs it): CNPs not checked with it")
	}
	// Wireshark 4.0 knows opcode 0x81 by number only: it shows the BTH
	// (byte 4, FECN and BECN, as "Reserved") and the 16 reserved bytes and
	// the ICRC as vendor data.
	fields := []string{"frame.number", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.reserved",
		"infiniband.bth.p_key", "infiniband.bth.psn", "ip.dsfield.dscp", "ip.dsfield.ecn", "ipv6.tclass.dscp", "ipv6.tclass.ecn",
		"_ws.malformed"}
	rows := 0
	for _, v := range tsharkRows(t, tshark, fields, "-r", path, "-Y", "infiniband.bth.opcode == 129") {
		rows++
		dscp, ecn := v["ip.dsfield.dscp"], v["ip.dsfield.ecn"]
		if dscp == "" {
			dscp, ecn = v["ipv6.tclass.dscp"], v["ipv6.tclass.ecn"]
		}
		if v["infiniband.bth.destqp"] != "0x000100" || v["infiniband.reserved"] != "40" || v["infiniband.bth.p_key"] != "65535" ||
			v["infiniband.bth.psn"] != "0" || dscp != "48" || ecn != "2" || v["_ws.malformed"] != "" {
			t.Errorf("tshark frame %s: %v", v["frame.number"], v)
		}
	}
	if rows != cnps {
		t.Errorf("tshark decodes %d CNPs, xroce sent %d", rows, cnps)
	}
	// And nothing in the capture is malformed to tshark. (Over IPv6 it
	// flags the UDP checksum 0 that RoCE v2 sends, rxe included.)
	bad, err := exec.Command(tshark, "-r", path, "-Y", "_ws.malformed || _ws.expert.severity >= error && !ipv6", "-T", "fields", "-e", "frame.number").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if n := len(bytes.Fields(bad)); n > 0 {
		t.Errorf("tshark finds %d frames malformed or in error: %s", n, bad)
	}
}
