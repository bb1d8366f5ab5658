package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"sort"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/pktfmt"
)

// What real capture files hold besides well-formed RoCE v2 (see
// bth.DecodeCaptured): frames cut after their headers by a snap length,
// RoCE v1, Mellanox DC, native InfiniBand, and frames whose UDP source port
// the ConnectX RDMA sniffer (tcpdump -i mlx5_X) rewrote to 4791 after the
// card computed the ICRC.

// Kinds of frames roceKind tells apart.
const (
	notRoCE = iota
	roceV1
	roceV2
)

// icrcState is what dump learned about a packet's ICRC.
type icrcState uint8

const (
	icrcGood        icrcState = iota // matches
	icrcWrong                        // does not match, with any source port
	icrcNotCaptured                  // header-only: the capture ends before the ICRC
	icrcSniffer                      // matches with the original source port (RDMA sniffer)
)

// capturedStats counts the frames of those kinds.
type capturedStats struct {
	v1         int  // RoCE v1 frames (all, also header-only or malformed ones)
	dc         int  // Mellanox DC packets (among the RoCE v2 ones)
	headerOnly int  // packets whose ICRC was not captured
	cutInHdrs  int  // of those, packets cut inside their headers
	nativeIB   int  // native InfiniBand (link type ERF) frames, not decoded
	erf        bool // the current frame came on the ERF link type
	sniffer    sniffer
}

// sniffer finds and remembers the original UDP source ports of frames the
// RDMA sniffer rewrote to 4791: the search runs once per flow (source,
// destination, destination QP); a new flow first tries the ports found so
// far.
type sniffer struct {
	byFlow  map[snifferFlow]uint16
	found   []uint16            // ports found, in the order found
	packets map[snifferPort]int // packets per source, destination and port
	count   int
}

type snifferFlow struct {
	src, dst netip.Addr
	qp       uint32
}

type snifferPort struct {
	src, dst netip.Addr
	port     uint16
}

// RoCE senders pick their UDP source port from this range (IBTA Vol 1
// Annex A17.2.4 recommends 0xC000-0xFFFF; rxe and ConnectX use it).
const sportLo, sportHi = 0xc000, 0xffff

// port returns the original source port of a frame whose ICRC fails with
// source port 4791, if one matches.
func (s *sniffer) port(f *bth.Frame) (uint16, bool) {
	if f.UDP == nil || f.UDP.SrcPort() != bth.UDPPort {
		return 0, false
	}
	k := snifferFlow{f.SrcIP(), f.DstIP(), f.BTH.DestQP()}
	if p, ok := s.byFlow[k]; ok && f.ICRCWithSrcPort(p) == f.ICRC {
		return s.count1(f, p), true
	}
	for _, p := range s.found {
		if f.ICRCWithSrcPort(p) == f.ICRC {
			s.byFlow[k] = p
			return s.count1(f, p), true
		}
	}
	p, ok := f.SrcPortForICRC(sportLo, sportHi)
	if !ok {
		return 0, false
	}
	if s.byFlow == nil {
		s.byFlow, s.packets = map[snifferFlow]uint16{}, map[snifferPort]int{}
	}
	s.byFlow[k] = p
	s.found = append(s.found, p)
	return s.count1(f, p), true
}

func (s *sniffer) count1(f *bth.Frame, p uint16) uint16 {
	s.packets[snifferPort{f.SrcIP(), f.DstIP(), p}]++
	s.count++
	return p
}

// checkICRC checks the decoded frame's ICRC and counts the result.
func (d *Dumper) checkICRC() icrcState {
	f := &d.f
	switch {
	case f.HeaderOnly():
		d.cap.headerOnly++
		return icrcNotCaptured
	case f.VerifyICRC():
		d.icrcOK++
		return icrcGood
	}
	if _, ok := d.cap.sniffer.port(f); ok {
		return icrcSniffer
	}
	d.ICRCBad++
	return icrcWrong
}

// decodeError counts and prints a frame DecodeCaptured rejected: one the
// capture cut inside its headers is header-only, anything else malformed.
func (d *Dumper) decodeError(ts string, kind int, err error) {
	version := "v2"
	if kind == roceV1 {
		version = "v1"
	}
	if errors.Is(err, bth.ReasonCut) {
		d.cap.headerOnly++
		d.cap.cutInHdrs++
		if !d.o.Quiet {
			fmt.Fprintf(d.w, "%6d %s header-only RoCE %s packet, cut inside its headers: %v\n", d.Packets, ts, version, err)
		}
		return
	}
	d.Malformed++
	if !d.o.Quiet {
		fmt.Fprintf(d.w, "%6d %s malformed RoCE %s packet: %v\n", d.Packets, ts, version, err)
	}
}

// wireICRC is an ICRC as Wireshark prints it: the four bytes in wire order
// read as a big-endian number (the CRC value itself is stored
// little-endian).
func wireICRC(v uint32) uint32 { return bits.ReverseBytes32(v) }

// appendICRC ends a packet line with the ICRC's state.
func (d *Dumper) appendICRC(b []byte, st icrcState) []byte {
	f := &d.f
	switch st {
	case icrcGood:
		b = append(b, " ICRC ok"...)
	case icrcWrong:
		b = fmt.Appendf(b, " ICRC BAD (0x%08x, want 0x%08x)", wireICRC(f.ICRC), wireICRC(f.ComputeICRC()))
	case icrcNotCaptured:
		b = append(b, " ICRC not captured"...)
	case icrcSniffer:
		b = fmt.Appendf(b, " ICRC ok with sport 0x%04x (sniffer)", d.cap.sniffer.byFlow[snifferFlow{f.SrcIP(), f.DstIP(), f.BTH.DestQP()}])
	}
	if f.IsRoCEv1() {
		b = append(b, " RoCE v1"...)
	}
	return append(b, '\n')
}

// snifferNote explains, on the UDP line of -v, a source port the RDMA
// sniffer rewrote.
func (d *Dumper) snifferNote(st icrcState) string {
	if st != icrcSniffer {
		return ""
	}
	f := &d.f
	p := d.cap.sniffer.byFlow[snifferFlow{f.SrcIP(), f.DstIP(), f.BTH.DestQP()}]
	return fmt.Sprintf("\n            the ICRC matches with source port 0x%04x (%d): the RDMA sniffer wrote 4791 over it", p, p)
}

// grhDetail prints the GRH of a RoCE v1 frame.
func (d *Dumper) grhDetail() {
	g := d.f.GRH
	fmt.Fprintf(d.w, "  GRH       RoCE v1  version 6  traffic class 0x%02x  flow label 0x%05x  payload length %d  next header 0x%02x (BTH)  hop limit %d\n",
		g.TrafficClass(), g.FlowLabel(), g.PayloadLen(), g.NextHeader(), g.HopLimit())
	fmt.Fprintf(d.w, "            src GID %s  dst GID %s\n", g.Src(), g.Dst())
}

// dcDetail draws the two headers a DC packet carries after its BTH.
func (d *Dumper) dcDetail() {
	f := &d.f
	pktfmt.DrawHeader(d.w, "DCETH: 8 bytes ConnectX puts after the BTH of a DC packet (layout not public; Wireshark counts them into the BTH)", []pktfmt.Field{
		{Name: "Word 0", Bits: 32, Value: uint64(binary.BigEndian.Uint32(f.DCETH)), Hex: true},
		{Name: "Word 1", Bits: 32, Value: uint64(binary.BigEndian.Uint32(f.DCETH[4:])), Hex: true}})
	pktfmt.DrawHeader(d.w, "RDETH: reliable datagram extended transport header, 4 bytes", []pktfmt.Field{
		{Name: "Reserved", Bits: 8, Value: uint64(f.RDETH[0])}, {Name: "EE-Context", Bits: 24, Value: uint64(f.RDETH.EEContext()), Hex: true}})
}

// wireLen returns the length of the decoded packet on the wire, from its IP
// (or GRH) header, without Ethernet.
func wireLen(f *bth.Frame) int {
	switch {
	case f.IPv4 != nil:
		return int(f.IPv4.TotalLen())
	case f.IPv6 != nil:
		return bth.IPv6Size + int(f.IPv6.PayloadLen())
	case f.GRH != nil:
		return bth.GRHSize + int(f.GRH.PayloadLen())
	}
	return 0
}

// payloadICRCDetail ends the -v form of a packet: payload and ICRC.
func (d *Dumper) payloadICRCDetail(st icrcState) {
	f, w := &d.f, d.w
	if st == icrcNotCaptured {
		fmt.Fprintf(w, "  payload   %d bytes captured (the packet is %d bytes on the wire, the capture holds %d), pad %d\n",
			len(f.Payload), wireLen(f), len(f.Packet()), f.PadLen)
		fmt.Fprintf(w, "  ICRC      not captured: the capture ends before it (header-only capture)\n\n")
		return
	}
	fmt.Fprintf(w, "  payload   %d bytes, pad %d\n", len(f.Payload), f.PadLen)
	const how = "as Wireshark shows it: the four bytes in wire order; the CRC value is 0x%08x"
	switch st {
	case icrcGood:
		fmt.Fprintf(w, "  ICRC      0x%08x (ok) "+how+"\n\n", wireICRC(f.ICRC), f.ICRC)
	case icrcSniffer:
		fmt.Fprintf(w, "  ICRC      0x%08x (ok with the original UDP source port) "+how+"\n\n", wireICRC(f.ICRC), f.ICRC)
	default:
		fmt.Fprintf(w, "  ICRC      0x%08x (BAD: computed 0x%08x) "+how+"\n\n", wireICRC(f.ICRC), wireICRC(f.ComputeICRC()), f.ICRC)
	}
}

// opName names an opcode in the summary: DC opcodes only come from DC
// packets, so the RD range is named as DC.
func opName(op bth.Opcode) string {
	if n := bth.DCName(op); n != "" {
		return n
	}
	return op.String()
}

// countsLine prints the summary's first line and, for what real captures
// add, one line each.
func (d *Dumper) countsLine() {
	w, c := d.w, &d.cap
	fmt.Fprintf(w, "\n%d packets: %d RoCE v2, ", d.Packets, d.roce)
	if c.v1 > 0 {
		fmt.Fprintf(w, "%d RoCE v1, ", c.v1)
	}
	if c.nativeIB > 0 {
		fmt.Fprintf(w, "%d native InfiniBand (ERF), not decoded, ", c.nativeIB)
	}
	fmt.Fprintf(w, "%d other (skipped), %d malformed; ICRC: %d ok, %d bad", d.other, d.Malformed, d.icrcOK, d.ICRCBad)
	if c.sniffer.count > 0 {
		fmt.Fprintf(w, ", %d ok with the original source port", c.sniffer.count)
	}
	if c.headerOnly > 0 {
		fmt.Fprintf(w, ", %d not captured", c.headerOnly)
	}
	fmt.Fprintln(w)
	if c.headerOnly > 0 {
		fmt.Fprintf(w, "Header-only: %d packets cut short by the capture (snap length): their headers decoded, their ICRC not captured", c.headerOnly)
		if c.cutInHdrs > 0 {
			fmt.Fprintf(w, "; %d cut inside their headers", c.cutInHdrs)
		}
		fmt.Fprintln(w)
	}
	if c.dc > 0 {
		fmt.Fprintf(w, "Mellanox DC (Dynamically Connected transport, opcodes of the RD range 0x40-0x5f): %d packets\n", c.dc)
	}
	if c.sniffer.count > 0 {
		keys := make([]snifferPort, 0, len(c.sniffer.packets))
		for k := range c.sniffer.packets {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := keys[i], keys[j]
			if c := compareRoute(a.src, a.dst, b.src, b.dst); c != 0 {
				return c < 0
			}
			return a.port < b.port
		})
		fmt.Fprintf(w, "UDP source port 4791 on %d packets whose ICRC matches only with another port:\n", c.sniffer.count)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s > %s %6d packets: ICRC matches with the original UDP source port 0x%04x: a capture from the RDMA sniffer, which rewrites it to 4791\n",
				k.src, k.dst, c.sniffer.packets[k], k.port)
		}
	}
}

// compareRoute orders source > destination pairs by source, then
// destination.
func compareRoute(aSrc, aDst, bSrc, bDst netip.Addr) int {
	if c := aSrc.Compare(bSrc); c != 0 {
		return c
	}
	return aDst.Compare(bDst)
}
