// Package capture decodes RoCE v2 captures for xroce's tools: it reads pcap
// and pcapng files (Ethernet, Linux cooked and raw IP links), decodes and
// prints each frame as xroce dump does, with the quirks of real captures
// (snap lengths, the RDMA sniffer's source port, RoCE v1, Mellanox DC), sums
// them up per opcode, CM message and queue pair, and builds the HTML page of
// a capture (package viz).
//
// It is a package below the tools because two of them read captures with
// it: dump, which adds its flags and live capture, and lab, which draws its
// own pcap as dump --html does. It imports no tool.
package capture

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/pktfmt"
)

// Options are how a Dumper prints: dump's flags.
type Options struct {
	Verbose   bool // -v: every header field, the headers drawn bit by bit
	Hexdump   bool // -x: each packet's payload in hex
	Count     int  // -c: stop after this many RoCE packets (0: all)
	Quiet     bool // -q: no per-packet lines
	NoSummary bool // -no-summary: the caller prints no Summary
}

// File decodes a capture file (pcap or pcapng).
func (d *Dumper) File(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	src, err := openCapture(f)
	if err != nil {
		return err
	}
	return d.run(src)
}

// flowKey names one direction of one queue pair: packets from src to dst
// for destination QP qp. Requests and read responses are tracked apart.
type flowKey struct {
	src, dst netip.Addr
	qp       uint32
	response bool
}

// flow is what dump learns about one flowKey's PSN sequence.
type flow struct {
	packets   int
	first     bth.PSN
	last      bth.PSN
	next      bth.PSN // expected PSN of the next packet
	high      bth.PSN // the highest next so far: PSNs before it were seen
	known     bool    // next is known
	gaps      int     // times the PSN jumped ahead
	missing   int     // PSNs skipped by those jumps
	retrans   int     // packets whose PSN went back (retransmissions, duplicates)
	naks      map[string]int
	inMessage bool // responses: inside a multi-packet read response
}

// A Dumper decodes RoCE frames, prints them as Options say and counts them
// for its Summary: opcodes, CM messages, ICRC failures, and each queue pair's
// PSN gaps and retransmissions. With HTML set, it also hands every frame to
// that page.
type Dumper struct {
	w   io.Writer
	o   Options
	f   bth.Frame
	t0  time.Time
	buf []byte // one output line

	// Packets counts the frames read, Malformed the RoCE frames that did
	// not decode, ICRCBad the RoCE packets whose ICRC is wrong.
	Packets, Malformed, ICRCBad int

	roce, other int
	byOpcode    map[bth.Opcode]int
	flows       map[flowKey]*flow
	mtu         int // learned from FIRST/MIDDLE payloads (they are exactly one MTU)
	cms         cmStats
	cap         capturedStats // what real captures add: v1, DC, header-only, sniffer
	icrcOK      int
	HTML        *HTMLPage // --html: the page being built, or nil
}

// NewDumper returns a Dumper that prints to w.
func NewDumper(w io.Writer, o Options) *Dumper {
	return &Dumper{w: w, o: o, byOpcode: map[bth.Opcode]int{}, flows: map[flowKey]*flow{}}
}

func (d *Dumper) run(src *packetSource) error {
	for !d.Done() {
		frame, ci, err := src.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		d.cap.erf = src.erf
		d.Packet(frame, ci.Timestamp)
	}
	return nil
}

// Done reports whether Count packets have been decoded.
func (d *Dumper) Done() bool { return d.o.Count > 0 && d.roce+d.cap.v1 >= d.o.Count }

// Packet decodes, accounts for and prints one frame (nil for a packet of a
// link type that cannot carry RoCE).
func (d *Dumper) Packet(frame []byte, t time.Time) {
	if d.HTML != nil {
		defer d.HTML.add(d, frame, t)
	}
	d.Packets++
	if d.Packets == 1 {
		d.t0 = t
	}
	ts := relTime(d.t0, t)
	kind := roceKind(frame)
	switch kind {
	case notRoCE:
		if d.cap.erf {
			d.cap.nativeIB++
		} else {
			d.other++
		}
		return
	case roceV1:
		d.cap.v1++
	default:
		d.roce++
	}
	if err := d.f.DecodeCaptured(frame); err != nil {
		d.decodeError(ts, kind, err)
		return
	}
	st := d.checkICRC()
	if d.f.IsDC() {
		d.cap.dc++
		d.byOpcode[d.f.Opcode()]++
	} else {
		d.account()
	}
	gsi := pktfmt.IsGSI(&d.f)
	if gsi {
		d.cms.account(&d.f)
	}
	if d.o.Quiet {
		return
	}
	d.line(ts, st)
	if gsi {
		d.buf = appendCM(d.buf[:0], &d.f)
		d.w.Write(d.buf)
	}
	if d.o.Verbose {
		d.detail(st)
	}
	if d.o.Hexdump && len(d.f.Payload) > 0 {
		fmt.Fprint(d.w, indent(hex.Dump(d.f.Payload), "        "))
	}
}

// roceKind tells whether a frame is RoCE v2 (addressed to UDP port 4791)
// or RoCE v1 (EtherType 0x8915), reading only as far as the headers the
// frame has: anything else is simply not RoCE, while a RoCE frame that
// fails to decode is malformed.
func roceKind(b []byte) int {
	if len(b) < 14 {
		return notRoCE
	}
	et, off := binary.BigEndian.Uint16(b[12:]), 14
	if et == 0x8100 && len(b) >= 18 {
		et, off = binary.BigEndian.Uint16(b[16:]), 18
	}
	if et == bth.EtherTypeRoCEv1 {
		return roceV1
	}
	if looksV2(b, et, off) {
		return roceV2
	}
	return notRoCE
}

// looksV2 reports whether the IP packet at off (EtherType et) is addressed
// to UDP port 4791.
func looksV2(b []byte, et uint16, off int) bool {
	var proto byte
	var udp int
	switch et {
	case 0x0800:
		if len(b) < off+20 {
			return false
		}
		proto, udp = b[off+9], off+int(b[off]&0xf)*4
		if binary.BigEndian.Uint16(b[off+6:])&0x1fff != 0 {
			return false // a later fragment: no UDP header
		}
	case 0x86dd:
		if len(b) < off+40 {
			return false
		}
		proto, udp = b[off+6], off+40
	default:
		return false
	}
	return proto == 17 && len(b) >= udp+4 && binary.BigEndian.Uint16(b[udp+2:]) == bth.UDPPort
}

// account updates the opcode counts and the PSN tracking of the packet's flow.
func (d *Dumper) account() {
	op := d.f.Opcode()
	d.byOpcode[op]++
	if (op.IsFirst() && !op.IsLast() || op.IsMiddle()) && len(d.f.Payload) > d.mtu && !d.f.HeaderOnly() {
		d.mtu = len(d.f.Payload)
	}
	if op == bth.OpCNP {
		return
	}
	resp := op.IsReadResponse() || op == bth.RCAck || op == bth.RCAtomicAck
	key := flowKey{src: d.f.SrcIP(), dst: d.f.DstIP(), qp: d.f.BTH.DestQP(), response: resp}
	fl := d.flows[key]
	if fl == nil {
		fl = &flow{first: d.f.BTH.PSN()}
		d.flows[key] = fl
	}
	fl.packets++
	psn := d.f.BTH.PSN()
	fl.last = psn
	if d.f.AETH != nil {
		if s := d.f.AETH.Syndrome(); !s.IsACK() {
			if fl.naks == nil {
				fl.naks = map[string]int{}
			}
			fl.naks[s.String()]++
		}
	}
	if resp {
		// Responses: only the packets inside one read response are
		// consecutive; ACKs are coalesced, so they skip PSNs by design.
		if !op.IsReadResponse() {
			return
		}
		if op.IsMiddle() || op.IsLast() && !op.IsFirst() {
			if fl.inMessage {
				d.step(fl, psn)
			}
		}
		fl.inMessage = !op.IsLast()
		fl.expect(psn.Add(1))
		return
	}
	d.step(fl, psn)
	consumed := uint32(1)
	if op == bth.RCReadRequest && d.f.RETH != nil {
		n := d.f.RETH.DMALen()
		switch {
		case d.mtu > 0:
			consumed = max(1, (n+uint32(d.mtu)-1)/uint32(d.mtu))
		case n > 0:
			// The path MTU is not known yet: the next PSN cannot be
			// predicted, so the next packet starts the count again.
			fl.known = false
			return
		}
	}
	fl.expect(psn.Add(consumed))
}

// expect records the PSN the flow's next packet should have.
func (fl *flow) expect(next bth.PSN) {
	if !fl.known || fl.high.Less(next) {
		fl.high = next
	}
	fl.next, fl.known = next, true
}

// step compares a packet's PSN with the expected one.
func (d *Dumper) step(fl *flow, psn bth.PSN) {
	if !fl.known {
		return
	}
	// Ahead of the expected PSN, only PSNs beyond the highest seen are
	// missing: a sender that went back and was acknowledged before it had
	// resent them all goes on from where it stopped (package qp resends
	// one packet after a time-out).
	switch diff := psn.Diff(fl.next); {
	case diff > 0:
		if m := psn.Diff(fl.high); m > 0 {
			fl.gaps++
			fl.missing += int(m)
		}
	case diff < 0:
		fl.retrans++
	}
}

// line prints the one-line form of the decoded packet.
func (d *Dumper) line(ts string, st icrcState) {
	f := &d.f
	b := d.buf[:0]
	b = fmt.Appendf(b, "%6d %s %s > %s %-28s QP 0x%06x PSN %-8d", d.Packets, ts, f.SrcIP(), f.DstIP(),
		f.OpcodeName(), f.BTH.DestQP(), f.BTH.PSN())
	if f.BTH.AckReq() {
		b = append(b, " A"...)
	} else {
		b = append(b, "  "...)
	}
	b = appendExt(b, f)
	b = fmt.Appendf(b, " len %d", len(f.Payload))
	b = d.appendICRC(b, st)
	d.buf = b
	d.w.Write(b)
}

// appendExt appends the key fields of each extension header present, and
// the congestion marks: CE in the IP header, FECN and BECN in the BTH (a
// CNP carries BECN).
func appendExt(b []byte, f *bth.Frame) []byte {
	if f.ECN() == bth.CE {
		b = append(b, " ECN CE"...)
	}
	if f.BTH.FECN() {
		b = append(b, " FECN"...)
	}
	if f.BTH.BECN() {
		b = append(b, " BECN"...)
	}
	if f.RDETH != nil {
		b = fmt.Appendf(b, " DC %08x %08x RDETH eec 0x%06x", binary.BigEndian.Uint32(f.DCETH), binary.BigEndian.Uint32(f.DCETH[4:]), f.RDETH.EEContext())
	}
	if f.DETH != nil {
		b = fmt.Appendf(b, " DETH qkey 0x%08x srcqp 0x%06x", f.DETH.QKey(), f.DETH.SrcQP())
	}
	if f.FETH != nil {
		b = fmt.Appendf(b, " FETH sel %d plt %d", f.FETH.SelectivityLevel(), f.FETH.PlacementType())
	}
	if f.RETH != nil {
		b = fmt.Appendf(b, " RETH va 0x%x rkey 0x%08x dlen %d", f.RETH.VA(), f.RETH.RKey(), f.RETH.DMALen())
	}
	if f.AtomicETH != nil {
		a := f.AtomicETH
		b = fmt.Appendf(b, " AtomicETH va 0x%x rkey 0x%08x swap/add 0x%x cmp 0x%x", a.VA(), a.RKey(), a.SwapAdd(), a.Compare())
	}
	if f.AETH != nil {
		b = fmt.Appendf(b, " AETH %s msn %d", f.AETH.Syndrome(), f.AETH.MSN())
	}
	if f.AtomicAckETH != nil {
		b = fmt.Appendf(b, " orig 0x%x", f.AtomicAckETH.OrigRemoteData())
	}
	if f.ImmDt != nil {
		b = fmt.Appendf(b, " imm 0x%08x", f.ImmDt.Imm())
	}
	if f.IETH != nil {
		b = fmt.Appendf(b, " IETH rkey 0x%08x", f.IETH.RKey())
	}
	return b
}

func boolBit(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// detail prints every field of every header of the decoded packet.
func (d *Dumper) detail(st icrcState) {
	f, w := &d.f, d.w
	fmt.Fprintf(w, "  Ethernet  dst %s  src %s  type 0x%04x\n", f.DstMAC(), f.SrcMAC(), f.Eth.EtherType())
	if f.VLAN != nil {
		fmt.Fprintf(w, "  802.1Q    pcp %d  dei %d  vid %d  type 0x%04x\n", f.VLAN.PCP(), boolBit(f.VLAN.DEI()), f.VLAN.ID(), f.VLAN.EtherType())
	}
	if ip := f.IPv4; ip != nil {
		fmt.Fprintf(w, "  IPv4      version 4  ihl %d  tos 0x%02x (dscp %d ecn %d %v)  total length %d  id 0x%04x\n",
			ip.IHL(), ip.TOS(), ip.TOS()>>2, ip.TOS()&3, bth.ECNOf(ip.TOS()), ip.TotalLen(), ip.ID())
		fmt.Fprintf(w, "            flags%s%s  fragment offset %d  ttl %d  protocol %d (UDP)  checksum 0x%04x\n",
			map[bool]string{true: " DF", false: ""}[ip.DF()], map[bool]string{true: " MF", false: ""}[ip.MF()],
			ip.FragOff(), ip.TTL(), ip.Protocol(), ip.Checksum())
		fmt.Fprintf(w, "            src %s  dst %s\n", ip.Src(), ip.Dst())
	}
	if ip := f.IPv6; ip != nil {
		tc := ip.TrafficClass()
		fmt.Fprintf(w, "  IPv6      traffic class 0x%02x (dscp %d ecn %d %v)  flow label 0x%05x  payload length %d  next header %d (UDP)  hop limit %d\n",
			tc, tc>>2, tc&3, bth.ECNOf(tc), ip.FlowLabel(), ip.PayloadLen(), ip.NextHeader(), ip.HopLimit())
		fmt.Fprintf(w, "            src %s  dst %s\n", ip.Src(), ip.Dst())
	}
	if f.GRH != nil {
		d.grhDetail()
	} else {
		fmt.Fprintf(w, "  UDP       src port %d  dst port %d (RoCE v2)  length %d  checksum 0x%04x%s\n",
			f.UDP.SrcPort(), f.UDP.DstPort(), f.UDP.Length(), f.UDP.Checksum(), d.snifferNote(st))
	}
	h := f.BTH
	fmt.Fprintf(w, "\n")
	pktfmt.DrawHeader(w, fmt.Sprintf("BTH: base transport header, 12 bytes (opcode 0x%02x = %s)", uint8(h.Opcode()), f.OpcodeName()), []pktfmt.Field{
		{Name: "OpCode", Bits: 8, Value: uint64(h.Opcode()), Hex: true},
		{Name: "S", Bits: 1, Value: boolBit(h.SE())}, {Name: "M", Bits: 1, Value: boolBit(h.MigReq())},
		{Name: "Pad", Bits: 2, Value: uint64(h.PadCnt())}, {Name: "TVer", Bits: 4, Value: uint64(h.TVer())},
		{Name: "P_Key", Bits: 16, Value: uint64(h.PKey()), Hex: true},
		{Name: "F", Bits: 1, Value: boolBit(h.FECN())}, {Name: "B", Bits: 1, Value: boolBit(h.BECN())}, {Name: "Resv6", Bits: 6, Value: uint64(h[4] & 0x3f)},
		{Name: "DestQP", Bits: 24, Value: uint64(h.DestQP()), Hex: true},
		{Name: "A", Bits: 1, Value: boolBit(h.AckReq())}, {Name: "Resv7", Bits: 7, Value: uint64(h[8] & 0x7f)},
		{Name: "PSN", Bits: 24, Value: uint64(h.PSN())},
	})
	fmt.Fprintln(w, "  S solicited event, M migration request, Pad pad count, F FECN, B BECN, A AckReq")
	if f.RDETH != nil {
		d.dcDetail()
	}
	if x := f.DETH; x != nil {
		pktfmt.DrawHeader(w, "DETH: datagram extended transport header, 8 bytes", []pktfmt.Field{
			{Name: "Q_Key", Bits: 32, Value: uint64(x.QKey()), Hex: true}, {Name: "Reserved", Bits: 8, Value: uint64(x[4])}, {Name: "SrcQP", Bits: 24, Value: uint64(x.SrcQP()), Hex: true}})
	}
	if x := f.FETH; x != nil {
		pktfmt.DrawHeader(w, "FETH: flush extended transport header, 4 bytes", []pktfmt.Field{
			{Name: "Reserved", Bits: 26, Value: uint64(binary.BigEndian.Uint32(x) >> 6)},
			{Name: "SelLevel", Bits: 2, Value: uint64(x.SelectivityLevel())}, {Name: "PlType", Bits: 4, Value: uint64(x.PlacementType())}})
	}
	if x := f.RETH; x != nil {
		pktfmt.DrawHeader(w, "RETH: RDMA extended transport header, 16 bytes", []pktfmt.Field{
			{Name: "VA", Bits: 64, Value: x.VA(), Hex: true}, {Name: "R_Key", Bits: 32, Value: uint64(x.RKey()), Hex: true}, {Name: "DMA Length", Bits: 32, Value: uint64(x.DMALen())}})
	}
	if x := f.AtomicETH; x != nil {
		pktfmt.DrawHeader(w, "AtomicETH: atomic extended transport header, 28 bytes", []pktfmt.Field{
			{Name: "VA", Bits: 64, Value: x.VA(), Hex: true}, {Name: "R_Key", Bits: 32, Value: uint64(x.RKey()), Hex: true},
			{Name: "Swap/Add", Bits: 64, Value: x.SwapAdd(), Hex: true}, {Name: "Compare", Bits: 64, Value: x.Compare(), Hex: true}})
	}
	if x := f.AETH; x != nil {
		pktfmt.DrawHeader(w, fmt.Sprintf("AETH: ACK extended transport header, 4 bytes (%s)", x.Syndrome()), []pktfmt.Field{
			{Name: "Syndrome", Bits: 8, Value: uint64(x.Syndrome()), Hex: true}, {Name: "MSN", Bits: 24, Value: uint64(x.MSN())}})
	}
	if x := f.AtomicAckETH; x != nil {
		pktfmt.DrawHeader(w, "AtomicAckETH: atomic ACK extended transport header, 8 bytes", []pktfmt.Field{
			{Name: "Original Remote Data", Bits: 64, Value: x.OrigRemoteData(), Hex: true}})
	}
	if x := f.ImmDt; x != nil {
		pktfmt.DrawHeader(w, "ImmDt: immediate data, 4 bytes", []pktfmt.Field{{Name: "Immediate Data", Bits: 32, Value: uint64(x.Imm()), Hex: true}})
	}
	if x := f.IETH; x != nil {
		pktfmt.DrawHeader(w, "IETH: invalidate extended transport header, 4 bytes", []pktfmt.Field{{Name: "R_Key", Bits: 32, Value: uint64(x.RKey()), Hex: true}})
	}
	if pktfmt.IsGSI(f) {
		d.cmDetail()
	}
	d.payloadICRCDetail(st)
}

// Summary prints the counts: packets, by opcode, CM messages, and each
// queue pair's PSN sequence.
func (d *Dumper) Summary() {
	w := d.w
	d.countsLine()
	if len(d.byOpcode) > 0 {
		fmt.Fprintln(w, "\nPackets by opcode:")
		ops := make([]bth.Opcode, 0, len(d.byOpcode))
		for op := range d.byOpcode {
			ops = append(ops, op)
		}
		sort.Slice(ops, func(i, j int) bool { return ops[i] < ops[j] })
		for _, op := range ops {
			fmt.Fprintf(w, "  0x%02x %-30s %8d\n", uint8(op), opName(op), d.byOpcode[op])
		}
	}
	d.cms.summary(w)
	if len(d.flows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nQueue pairs (source > destination, destination QP):")
	keys := make([]flowKey, 0, len(d.flows))
	for k := range d.flows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if c := compareRoute(a.src, a.dst, b.src, b.dst); c != 0 {
			return c < 0
		}
		if a.qp != b.qp {
			return a.qp < b.qp
		}
		return !a.response && b.response
	})
	for _, k := range keys {
		fl := d.flows[k]
		kind := "requests "
		if k.response {
			kind = "responses"
		}
		fmt.Fprintf(w, "  %s > %s QP 0x%06x %s %6d packets, PSN %d..%d", k.src, k.dst, k.qp, kind, fl.packets, fl.first, fl.last)
		fmt.Fprintf(w, ", %d gaps (%d PSNs missing), %d retransmitted", fl.gaps, fl.missing, fl.retrans)
		if len(fl.naks) > 0 {
			var parts []string
			for s, n := range fl.naks {
				parts = append(parts, fmt.Sprintf("%d %s", n, s))
			}
			sort.Strings(parts)
			fmt.Fprintf(w, ", %s", strings.Join(parts, ", "))
		}
		fmt.Fprintln(w)
	}
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}
