package capture

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/pktfmt"
	"github.com/xroce/xroce/internal/viz"
)

// An HTMLPage builds the page of dump --html and lab --html (package viz) from
// the frames a dumper reads: it decodes each frame again for the drawing,
// and marks what is special about it: retransmissions (a PSN sent again),
// NAKs, RNR waits, frames lost after the capture point (the request a PSN
// sequence NAK names) and before it (the dumper's PSN gaps).
type HTMLPage struct {
	c     viz.Capture
	names map[netip.Addr]string // endpoint names, e.g. the lab's A and B
	f     bth.Frame
	t0    time.Time

	flows   map[flowKey]*htmlFlow
	lastReq map[psnKey]int // the last request with a PSN, by index in c.Packets
	halves  []halfKey      // each packet's sender, receiver and destination QP
	srcQP   map[halfKey]uint32
	votes   map[[2]halfKey]int // responses that answer a request of the other half
}

// htmlFlow is what the page remembers of one of the dumper's flows.
type htmlFlow struct {
	gaps, missing int     // the dumper's counts after the last packet
	max           bth.PSN // the highest PSN sent
	seen          bool
}

// psnKey names the requests from src to dst with one PSN.
type psnKey struct {
	src, dst netip.Addr
	psn      bth.PSN
}

// halfKey is one direction of a queue pair's traffic: what src sends to
// QP qp at dst.
type halfKey struct {
	src, dst netip.Addr
	qp       uint32
}

// NewHTMLPage returns an empty page titled title, naming where its frames
// come from (source) and, by address, the endpoints names knows.
func NewHTMLPage(title, source string, names map[netip.Addr]string) *HTMLPage {
	return &HTMLPage{
		c:       viz.Capture{Title: title, Source: source},
		names:   names,
		flows:   map[flowKey]*htmlFlow{},
		lastReq: map[psnKey]int{},
		srcQP:   map[halfKey]uint32{},
		votes:   map[[2]halfKey]int{},
	}
}

// add takes the frame the dumper d has just decoded and accounted for.
func (h *HTMLPage) add(d *Dumper, frame []byte, t time.Time) {
	h.c.Frames++
	if h.c.Frames == 1 {
		h.t0 = t
	}
	if frame == nil || roceKind(frame) == notRoCE {
		h.c.Skipped++
		return
	}
	if len(h.c.Packets) >= viz.MaxPackets {
		h.c.Truncated++
		return
	}
	p := viz.Packet{N: h.c.Frames, Time: t.Sub(h.t0), Pair: -1, Wire: len(frame)}
	f := &h.f
	if err := f.DecodeCaptured(frame); err != nil {
		p.Marks, p.Error = viz.MarkBad, "malformed: "+err.Error()
		p.Opcode, p.Label = "malformed", p.Error
		h.c.Packets = append(h.c.Packets, p)
		h.halves = append(h.halves, halfKey{})
		return
	}
	op := f.Opcode()
	resp := op.IsReadResponse() || op == bth.RCAck || op == bth.RCAtomicAck
	psn := f.BTH.PSN()
	p.Src, p.Dst, p.DestQP = f.SrcIP().String(), f.DstIP().String(), f.BTH.DestQP()
	p.Opcode, p.PSN, p.AckReq, p.Response = f.OpcodeName(), uint32(psn), f.BTH.AckReq(), resp
	p.Payload, p.Wire = len(f.Payload), f.Len()
	p.Data = op != bth.OpCNP && (!resp || op.IsReadResponse())
	p.Label = pktfmt.Describe(f)
	p.Headers = frameHeaders(f)
	var notes []string
	// A header-only frame has no ICRC to check; one of the RDMA
	// sniffer's (source port rewritten) is judged by the text dump.
	if !f.HeaderOnly() && !f.VerifyICRC() && !d.sniffed(f) {
		p.Marks |= viz.MarkBad
		p.Error = fmt.Sprintf("ICRC 0x%08x, computed 0x%08x", f.ICRC, f.ComputeICRC())
		p.Label += " ICRC BAD"
	}
	if pktfmt.IsGSI(f) {
		p.Marks |= viz.MarkCM
	}
	half := halfKey{f.SrcIP(), f.DstIP(), f.BTH.DestQP()}
	if f.DETH != nil {
		h.srcQP[half] = f.DETH.SrcQP()
	}
	key := flowKey{src: f.SrcIP(), dst: f.DstIP(), qp: f.BTH.DestQP(), response: resp}
	fl := h.flows[key]
	if fl == nil {
		fl = &htmlFlow{}
		h.flows[key] = fl
	}
	// The dumper's gap count went up: PSNs before this one are missing.
	if df := d.flows[key]; df != nil {
		if df.gaps > fl.gaps {
			p.Marks |= viz.MarkGap
			p.Missing = df.missing - fl.missing
			notes = append(notes, fmt.Sprintf("%s missing before this one", base.Plural(p.Missing, "PSN")))
		}
		fl.gaps, fl.missing = df.gaps, df.missing
	}
	if p.Data {
		if fl.seen && psn.Diff(fl.max) <= 0 {
			p.Marks |= viz.MarkRetrans
			note := fmt.Sprintf("retransmission of PSN %d", psn)
			if i, ok := h.lastReq[psnKey{f.SrcIP(), f.DstIP(), psn}]; ok && !resp {
				note += fmt.Sprintf(" (last sent in #%d)", h.c.Packets[i].N)
			}
			notes = append(notes, note)
		} else {
			fl.max, fl.seen = psn, true
		}
	}
	i := len(h.c.Packets)
	if !resp {
		h.lastReq[psnKey{f.SrcIP(), f.DstIP(), psn}] = i
	} else if j, ok := h.lastReq[psnKey{f.DstIP(), f.SrcIP(), psn}]; ok {
		// This answers request j: the two halves are one queue pair.
		h.votes[[2]halfKey{half, h.halves[j]}]++
	}
	if f.AETH != nil {
		switch s := f.AETH.Syndrome(); {
		case s.IsACK():
			p.Acked = op == bth.RCAck || op == bth.RCAtomicAck
		case s.IsRNRNak():
			p.Marks |= viz.MarkRNR
			p.RNRWait = s.RNRTimer()
			notes = append(notes, fmt.Sprintf("RNR NAK: no receive WQE; retry after %v", s.RNRTimer()))
		case s == bth.NakPSNSeqError:
			p.Marks |= viz.MarkNAK
			notes = append(notes, fmt.Sprintf("NAK: PSN sequence error, PSN %d expected", psn))
			// Seen on its way, the request the NAK names never arrived.
			if j, ok := h.lastReq[psnKey{f.DstIP(), f.SrcIP(), psn}]; ok {
				q := &h.c.Packets[j]
				if q.Marks&viz.MarkLost == 0 {
					q.Marks |= viz.MarkLost
					q.Note = strings.TrimPrefix(q.Note+"; lost: never reached "+q.Dst+fmt.Sprintf(" (NAK #%d)", p.N), "; ")
				}
			}
		default:
			p.Marks |= viz.MarkNAKError
			notes = append(notes, "NAK: "+s.String())
		}
	}
	p.Note = strings.Join(notes, "; ")
	h.c.Packets = append(h.c.Packets, p)
	h.halves = append(h.halves, half)
}

// endpoint is one end of a queue pair as the page finds it.
type endpoint struct {
	addr  netip.Addr
	qp    uint32
	known bool
}

// Finish gives each packet its pair: the receiving end is the destination
// QP; the sending end is the DETH's source QP (UD), or the destination QP
// of the other direction whose responses answer this one's requests (RC),
// or unknown (UC, or RC without answers in the capture). It returns the
// page's model, as Write draws it.
func (h *HTMLPage) Finish() *viz.Capture {
	h.c.Pairs = h.c.Pairs[:0]
	partner := map[halfKey]halfKey{}
	best := map[halfKey]int{}
	for k, n := range h.votes {
		for _, x := range [][2]halfKey{k, {k[1], k[0]}} {
			if n > best[x[0]] {
				best[x[0]], partner[x[0]] = n, x[1]
			}
		}
	}
	pairs := map[[2]endpoint]int{}
	for i := range h.c.Packets {
		p := &h.c.Packets[i]
		hk := h.halves[i]
		if !hk.src.IsValid() {
			continue
		}
		src := endpoint{addr: hk.src}
		if q, ok := h.srcQP[hk]; ok {
			src.qp, src.known = q, true
		} else if o, ok := partner[hk]; ok {
			src.qp, src.known = o.qp, true
		}
		dst := endpoint{addr: hk.dst, qp: hk.qp, known: true}
		idx, ok := pairs[[2]endpoint{src, dst}]
		p.FromA = true
		if !ok {
			if idx, ok = pairs[[2]endpoint{dst, src}]; ok {
				p.FromA = false
			}
		}
		if !ok {
			idx = len(h.c.Pairs)
			pairs[[2]endpoint{src, dst}] = idx
			transport, _, _ := strings.Cut(p.Opcode, " ") // "RC SEND_ONLY"
			if p.Marks&viz.MarkCM != 0 {
				transport = "CM"
			}
			h.c.Pairs = append(h.c.Pairs, viz.Pair{A: h.vizEndpoint(src), B: h.vizEndpoint(dst), Transport: transport})
		}
		p.Pair = idx
	}
	return &h.c
}

func (h *HTMLPage) vizEndpoint(e endpoint) viz.Endpoint {
	return viz.Endpoint{Name: h.names[e.addr], Addr: e.addr.String(), QP: e.qp, QPKnown: e.known}
}

// Write renders the page into path.
func (h *HTMLPage) Write(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	err = viz.Write(w, h.Finish())
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// frameHeaders lists a decoded frame's headers for the page: Ethernet, IP
// and UDP as summary lines, then the BTH, each extension header and the
// ICRC field by field, and the CM message of a MAD.
func frameHeaders(f *bth.Frame) []viz.Header {
	hs := []viz.Header{{Name: "Ethernet", Title: fmt.Sprintf("%s > %s, type 0x%04x", f.SrcMAC(), f.DstMAC(), f.Eth.EtherType())}}
	if v := f.VLAN; v != nil {
		hs = append(hs, viz.Header{Name: "802.1Q", Title: fmt.Sprintf("vid %d, pcp %d, dei %d, type 0x%04x", v.ID(), v.PCP(), boolBit(v.DEI()), v.EtherType())})
	}
	if ip := f.IPv4; ip != nil {
		flags := ""
		if ip.DF() {
			flags += ", DF"
		}
		if ip.MF() {
			flags += ", MF"
		}
		hs = append(hs, viz.Header{Name: "IPv4", Title: fmt.Sprintf("%s > %s, tos 0x%02x (dscp %d ecn %d), ttl %d, id 0x%04x%s, length %d, checksum 0x%04x",
			ip.Src(), ip.Dst(), ip.TOS(), ip.TOS()>>2, ip.TOS()&3, ip.TTL(), ip.ID(), flags, ip.TotalLen(), ip.Checksum())})
	}
	if ip := f.IPv6; ip != nil {
		hs = append(hs, viz.Header{Name: "IPv6", Title: fmt.Sprintf("%s > %s, traffic class 0x%02x, flow label 0x%05x, hop limit %d, payload length %d",
			ip.Src(), ip.Dst(), ip.TrafficClass(), ip.FlowLabel(), ip.HopLimit(), ip.PayloadLen())})
	}
	hs = append(hs, viz.Header{Name: "UDP", Title: fmt.Sprintf("port %d > %d (RoCE v2), length %d, checksum 0x%04x",
		f.UDP.SrcPort(), f.UDP.DstPort(), f.UDP.Length(), f.UDP.Checksum())})
	b := f.BTH
	hs = append(hs, viz.Header{Name: "BTH", Title: fmt.Sprintf("opcode 0x%02x = %s", uint8(b.Opcode()), b.Opcode()),
		About: "base transport header, 12 bytes (S solicited event, M MigReq, Pad pad count, F FECN, B BECN, A AckReq)",
		Fields: vizFields(
			pktfmt.Field{Name: "OpCode", Bits: 8, Value: uint64(b.Opcode()), Hex: true},
			pktfmt.Field{Name: "S", Bits: 1, Value: boolBit(b.SE())}, pktfmt.Field{Name: "M", Bits: 1, Value: boolBit(b.MigReq())},
			pktfmt.Field{Name: "Pad", Bits: 2, Value: uint64(b.PadCnt())}, pktfmt.Field{Name: "TVer", Bits: 4, Value: uint64(b.TVer())},
			pktfmt.Field{Name: "P_Key", Bits: 16, Value: uint64(b.PKey()), Hex: true},
			pktfmt.Field{Name: "F", Bits: 1, Value: boolBit(b.FECN())}, pktfmt.Field{Name: "B", Bits: 1, Value: boolBit(b.BECN())}, pktfmt.Field{Name: "Resv6", Bits: 6, Value: uint64(b[4] & 0x3f)},
			pktfmt.Field{Name: "DestQP", Bits: 24, Value: uint64(b.DestQP()), Hex: true},
			pktfmt.Field{Name: "A", Bits: 1, Value: boolBit(b.AckReq())}, pktfmt.Field{Name: "Resv7", Bits: 7, Value: uint64(b[8] & 0x7f)},
			pktfmt.Field{Name: "PSN", Bits: 24, Value: uint64(b.PSN())})})
	if x := f.DETH; x != nil {
		hs = append(hs, viz.Header{Name: "DETH", About: "datagram extended transport header, 8 bytes", Fields: vizFields(
			pktfmt.Field{Name: "Q_Key", Bits: 32, Value: uint64(x.QKey()), Hex: true}, pktfmt.Field{Name: "Reserved", Bits: 8, Value: uint64(x[4])}, pktfmt.Field{Name: "SrcQP", Bits: 24, Value: uint64(x.SrcQP()), Hex: true})})
	}
	if x := f.FETH; x != nil {
		hs = append(hs, viz.Header{Name: "FETH", About: "flush extended transport header, 4 bytes", Fields: vizFields(
			pktfmt.Field{Name: "Reserved", Bits: 26, Value: uint64(binary.BigEndian.Uint32(x) >> 6)},
			pktfmt.Field{Name: "SelLevel", Bits: 2, Value: uint64(x.SelectivityLevel())}, pktfmt.Field{Name: "PlType", Bits: 4, Value: uint64(x.PlacementType())})})
	}
	if x := f.RETH; x != nil {
		hs = append(hs, viz.Header{Name: "RETH", About: "RDMA extended transport header, 16 bytes", Fields: vizFields(
			pktfmt.Field{Name: "VA", Bits: 64, Value: x.VA(), Hex: true}, pktfmt.Field{Name: "R_Key", Bits: 32, Value: uint64(x.RKey()), Hex: true}, pktfmt.Field{Name: "DMA Length", Bits: 32, Value: uint64(x.DMALen())})})
	}
	if x := f.AtomicETH; x != nil {
		hs = append(hs, viz.Header{Name: "AtomicETH", About: "atomic extended transport header, 28 bytes", Fields: vizFields(
			pktfmt.Field{Name: "VA", Bits: 64, Value: x.VA(), Hex: true}, pktfmt.Field{Name: "R_Key", Bits: 32, Value: uint64(x.RKey()), Hex: true},
			pktfmt.Field{Name: "Swap/Add", Bits: 64, Value: x.SwapAdd(), Hex: true}, pktfmt.Field{Name: "Compare", Bits: 64, Value: x.Compare(), Hex: true})})
	}
	if x := f.AETH; x != nil {
		hs = append(hs, viz.Header{Name: "AETH", About: "ACK extended transport header, 4 bytes", Title: x.Syndrome().String(), Fields: vizFields(
			pktfmt.Field{Name: "Syndrome", Bits: 8, Value: uint64(x.Syndrome()), Hex: true}, pktfmt.Field{Name: "MSN", Bits: 24, Value: uint64(x.MSN())})})
	}
	if x := f.AtomicAckETH; x != nil {
		hs = append(hs, viz.Header{Name: "AtomicAckETH", About: "atomic ACK extended transport header, 8 bytes", Fields: vizFields(
			pktfmt.Field{Name: "Original Remote Data", Bits: 64, Value: x.OrigRemoteData(), Hex: true})})
	}
	if x := f.ImmDt; x != nil {
		hs = append(hs, viz.Header{Name: "ImmDt", About: "immediate data, 4 bytes", Fields: vizFields(pktfmt.Field{Name: "Immediate Data", Bits: 32, Value: uint64(x.Imm()), Hex: true})})
	}
	if x := f.IETH; x != nil {
		hs = append(hs, viz.Header{Name: "IETH", About: "invalidate extended transport header, 4 bytes", Fields: vizFields(pktfmt.Field{Name: "R_Key", Bits: 32, Value: uint64(x.RKey()), Hex: true})})
	}
	if pktfmt.IsGSI(f) {
		for _, l := range strings.Split(strings.TrimSpace(string(appendCM(nil, f))), "\n") {
			hs = append(hs, viz.Header{Name: "MAD", Title: strings.TrimSpace(l)})
		}
	}
	hs = append(hs, viz.Header{Name: "Payload", Title: fmt.Sprintf("%d bytes, pad %d", len(f.Payload), f.PadLen)})
	// The ICRC as Wireshark shows it: the four bytes in wire order.
	wire := bits.ReverseBytes32(f.ICRC)
	state := "ok"
	if want := f.ComputeICRC(); want != f.ICRC {
		state = fmt.Sprintf("BAD, should be 0x%08x in wire order", bits.ReverseBytes32(want))
	}
	hs = append(hs, viz.Header{Name: "ICRC", Title: fmt.Sprintf("%s (CRC-32 0x%08x)", state, f.ICRC),
		About:  "invariant CRC, 4 bytes, in wire order (the CRC is stored little-endian)",
		Fields: []viz.Field{{Name: "ICRC", Bits: 32, Value: fmt.Sprintf("0x%08x", wire)}}})
	return hs
}

// vizFields formats fields for the page: hex ones with as many digits as
// their width holds.
func vizFields(fs ...pktfmt.Field) []viz.Field {
	out := make([]viz.Field, len(fs))
	for i, f := range fs {
		v := fmt.Sprint(f.Value)
		if f.Hex {
			v = fmt.Sprintf("0x%0*x", (f.Bits+3)/4, f.Value)
		}
		out[i] = viz.Field{Name: f.Name, Bits: f.Bits, Value: v}
	}
	return out
}

// sniffed reports whether f's ICRC matches with an original source port
// the RDMA sniffer overwrote (the search is the dumper's, cached per flow).
func (d *Dumper) sniffed(f *bth.Frame) bool {
	_, ok := d.cap.sniffer.port(f)
	return ok
}
