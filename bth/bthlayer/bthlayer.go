// Package bthlayer is a gopacket layer for RoCE v2: the InfiniBand Base
// Transport Header and its extension headers (IBTA Vol 1 §9.2, §9.3; Annex
// A17 RoCEv2), decoded with package bth.
//
// Importing the package registers LayerTypeBTH for UDP port 4791, so any
// gopacket decoding of Ethernet frames (gopacket.NewPacket, a pcap reader,
// a DecodingLayerParser with a *BTH) shows the transport headers:
//
//	packet := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
//	if l, ok := packet.Layer(bthlayer.LayerTypeBTH).(*bthlayer.BTH); ok {
//		fmt.Println(l.Opcode, l.PSN, gopacket.LayerString(l))
//	}
//
// The layer's payload is the RoCE payload without pad and ICRC. When decoded
// as part of a gopacket.Packet, the ICRC is verified against the IP header.
package bthlayer

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/xroce/xroce/bth"
)

// LayerTypeNumber is the gopacket layer type number used for BTH (numbers
// of 2000 and above are free for applications; this one is the UDP port).
const LayerTypeNumber = 4791

// LayerTypeBTH is the gopacket layer type of RoCE v2 transport headers.
var LayerTypeBTH = gopacket.RegisterLayerType(LayerTypeNumber, gopacket.LayerTypeMetadata{
	Name:    "RoCEv2",
	Decoder: gopacket.DecodeFunc(decodeBTH),
})

func init() {
	layers.RegisterUDPPortLayerType(layers.UDPPort(bth.UDPPort), LayerTypeBTH)
}

// BTH is a decoded RoCE v2 transport header: the BTH fields, each extension
// header the opcode carries (nil otherwise) and the ICRC. Contents holds
// the BTH and extension headers, Payload the payload without pad and ICRC.
type BTH struct {
	layers.BaseLayer
	bth.BTHFields

	DETH         *bth.DETHFields
	FETH         *bth.FETHFields
	RETH         *bth.RETHFields
	AtomicETH    *bth.AtomicETHFields
	AETH         *bth.AETHFields
	AtomicAckETH *AtomicAckETH
	ImmDt        *ImmDt
	IETH         *IETH
	CNPReserved  []byte

	ICRC      uint32 // as on the wire (stored little-endian)
	ICRCValid *bool  // nil when the IP header was not available to check it

	ext extStore // storage the extension header pointers point into
}

// AtomicAckETH is the Atomic Acknowledge ETH: the original remote value.
type AtomicAckETH struct{ OrigRemoteData uint64 }

// ImmDt is the immediate data.
type ImmDt struct{ Imm uint32 }

// IETH is the R_Key to invalidate.
type IETH struct{ RKey uint32 }

type extStore struct {
	deth   bth.DETHFields
	feth   bth.FETHFields
	reth   bth.RETHFields
	atomic bth.AtomicETHFields
	aeth   bth.AETHFields
	ack    AtomicAckETH
	imm    ImmDt
	ieth   IETH
}

// LayerType returns LayerTypeBTH.
func (l *BTH) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode returns LayerTypeBTH.
func (l *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType returns the payload layer, or LayerTypeZero when there is
// no payload.
func (l *BTH) NextLayerType() gopacket.LayerType {
	if len(l.Payload) == 0 {
		return gopacket.LayerTypeZero
	}
	return gopacket.LayerTypePayload
}

// Errors of DecodeFromBytes.
var (
	ErrTruncated = errors.New("roce: truncated")
	ErrOpcode    = errors.New("roce: unknown opcode")
	ErrPadCnt    = errors.New("roce: PadCnt exceeds payload")
)

// DecodeFromBytes decodes the UDP payload of a RoCE v2 packet: BTH,
// extension headers, payload, pad and ICRC.
func (l *BTH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if len(data) < bth.BTHSize+bth.ICRCSize {
		df.SetTruncated()
		return fmt.Errorf("decode bth: %d bytes: %w", len(data), ErrTruncated)
	}
	h := bth.BTH(data)
	op := h.Opcode()
	if !op.Known() {
		return fmt.Errorf("decode bth: opcode %#x: %w", uint8(op), ErrOpcode)
	}
	hdrLen := bth.BTHSize + op.Headers().Size()
	end := len(data) - bth.ICRCSize
	if end < hdrLen {
		df.SetTruncated()
		return fmt.Errorf("decode bth: %v needs %d header bytes, have %d: %w", op, hdrLen, end, ErrTruncated)
	}
	pad := int(h.PadCnt())
	if end-hdrLen < pad {
		return fmt.Errorf("decode bth: %v: %w", op, ErrPadCnt)
	}
	*l = BTH{BTHFields: h.Fields(), ext: l.ext}
	s := &l.ext
	off := bth.BTHSize
	for e := range op.Headers().All {
		v := data[off : off+e.Size()]
		off += e.Size()
		switch e {
		case bth.ExtDETH:
			s.deth = bth.DETH(v).Fields()
			l.DETH = &s.deth
		case bth.ExtFETH:
			s.feth = bth.FETH(v).Fields()
			l.FETH = &s.feth
		case bth.ExtRETH:
			s.reth = bth.RETH(v).Fields()
			l.RETH = &s.reth
		case bth.ExtAtomicETH:
			s.atomic = bth.AtomicETH(v).Fields()
			l.AtomicETH = &s.atomic
		case bth.ExtAETH:
			s.aeth = bth.AETH(v).Fields()
			l.AETH = &s.aeth
		case bth.ExtAtomicAckETH:
			s.ack = AtomicAckETH{bth.AtomicAckETH(v).OrigRemoteData()}
			l.AtomicAckETH = &s.ack
		case bth.ExtImmDt:
			s.imm = ImmDt{bth.ImmDt(v).Imm()}
			l.ImmDt = &s.imm
		case bth.ExtIETH:
			s.ieth = IETH{bth.IETH(v).RKey()}
			l.IETH = &s.ieth
		case bth.ExtCNPReserved:
			l.CNPReserved = v
		}
	}
	l.Contents = data[:hdrLen]
	l.Payload = data[hdrLen : end-pad]
	l.ICRC = binary.LittleEndian.Uint32(data[end:])
	return nil
}

func decodeBTH(data []byte, p gopacket.PacketBuilder) error {
	l := &BTH{}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l)
	if pk, ok := p.(gopacket.Packet); ok {
		l.checkICRC(pk, data)
	}
	return p.NextDecoder(l.NextLayerType())
}

// checkICRC verifies the ICRC when the packet's IP layer ends exactly where
// the RoCE packet ends and the bytes are contiguous.
func (l *BTH) checkICRC(pk gopacket.Packet, data []byte) {
	nl := pk.NetworkLayer()
	if nl == nil {
		return
	}
	c := nl.LayerContents()
	n := len(c) + len(nl.LayerPayload())
	if len(c) == 0 || cap(c) < n {
		return
	}
	ip := c[:n]
	// data must be the tail of ip (UDP payload of this IP packet).
	if len(data) > len(ip) || &ip[len(ip)-len(data)] != &data[0] {
		return
	}
	sum, err := bth.ICRC(ip)
	if err != nil {
		return
	}
	ok := sum == l.ICRC
	l.ICRCValid = &ok
}

// Summary describes the header in one line, like
// "RC RDMA_WRITE_ONLY QP 0x11 PSN 100 A VA 0x1000 RKey 0x1234 len 64".
// (gopacket.LayerString prints every field.)
func (l *BTH) Summary() string {
	s := fmt.Sprintf("%v QP %#x PSN %v", l.Opcode, l.DestQP, l.PSN)
	if l.AckReq {
		s += " A"
	}
	if l.AETH != nil {
		s += fmt.Sprintf(" %v MSN %v", l.AETH.Syndrome, l.AETH.MSN)
	}
	if l.RETH != nil {
		s += fmt.Sprintf(" VA %#x RKey %#x len %d", l.RETH.VA, l.RETH.RKey, l.RETH.DMALen)
	}
	if l.DETH != nil {
		s += fmt.Sprintf(" QKey %#x SrcQP %#x", l.DETH.QKey, l.DETH.SrcQP)
	}
	if l.ImmDt != nil {
		s += fmt.Sprintf(" Imm %#x", l.ImmDt.Imm)
	}
	if l.ICRCValid != nil && !*l.ICRCValid {
		s += " BAD-ICRC"
	}
	return s
}
