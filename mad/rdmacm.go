package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space): the
// protocol half of an rdma_cm service ID.
type PortSpace uint16

// rdma_cm port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106 // RC connections (RDMA_PS_TCP)
	PortSpaceUDP   PortSpace = 0x0111 // UD, resolved by SIDR (RDMA_PS_UDP)
	PortSpaceIB    PortSpace = 0x013F // RC or UD (RDMA_PS_IB)
)

func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceIPoIB:
		return "IPOIB"
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	}
	return fmt.Sprintf("PortSpace(0x%04x)", uint16(ps))
}

// ServiceID returns the service ID rdma_cm listens on for a port of a port
// space: 0x0000_0000_PPPP_pppp, port space then port (cma.c
// rdma_get_service_id). rping on port 7174 is ServiceID(PortSpaceTCP, 7174)
// = 0x0000000001061C06.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID undoes ServiceID; ok is false unless the top 32 bits are
// zero and the port space is one of the four rdma_cm defines.
func SplitServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	if id>>32 != 0 {
		return 0, 0, false
	}
	ps, port = PortSpace(id>>16), uint16(id)
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		return ps, port, true
	}
	return 0, 0, false
}

// CMAHeaderSize is the length of the rdma_cm header; RDMAUDPQKey is the
// Q_Key of rdma_cm UD QPs in the UDP and IB port spaces.
const (
	CMAHeaderSize = 36
	RDMAUDPQKey   = 0x01234567
)

// CMAHeader errors.
var (
	ErrCMAVersion   = errors.New("mad: rdma_cm header version is not 0")
	ErrCMAIPVersion = errors.New("mad: rdma_cm header IP version is neither 4 nor 6")
)

// CMAHeader is a view of the header that rdma_cm (struct cma_hdr in the
// kernel's cma.c) writes at the start of the private data of REQ and
// SIDR_REQ for AF_INET and AF_INET6 connections; the consumer's private data
// follows it, so it gets 56 of a REQ's 92 bytes. The layout is IBTA Vol 1
// Annex A11 (RDMA IP CM Service), which calls byte 0 MajV/MinV.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Version    | IPV   |  Rsv  |          Source Port          |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Source IP Address (16)                      |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Destination IP Address (16)                   |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Version is 0. IPV is 4 or 6; an IPv4 address is written as 12 zero bytes
// and the 4 address bytes (not in the ::ffff: form of a GID). The port is
// the active side's source port; the destination port is in the service
// ID. The view must be at least CMAHeaderSize long.
type CMAHeader []byte

// Version returns the header version (byte 0; 0 is the only one).
func (h CMAHeader) Version() uint8 { return h[0] }

// IPVersion returns the IP version, the upper nibble of byte 1.
func (h CMAHeader) IPVersion() uint8 { return h[1] >> 4 }

// Port returns the active side's source port.
func (h CMAHeader) Port() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// Src returns the active side's address: IPv4 from bytes 16..19 when
// IPVersion is 4, else the IPv6 address at 4..19.
func (h CMAHeader) Src() netip.Addr { return h.addr(4) }

// Dst returns the passive side's address: IPv4 from bytes 32..35 when
// IPVersion is 4, else the IPv6 address at 20..35.
func (h CMAHeader) Dst() netip.Addr { return h.addr(20) }

func (h CMAHeader) addr(off int) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(h[off+12 : off+16]))
	}
	return netip.AddrFrom16([16]byte(h[off : off+16]))
}

// Encode writes a version 0 header for a connection from src to dst, with
// the active side's source port. The IP version follows src: 4 for an IPv4
// or IPv4-mapped address (written as 12 zero bytes and the address), else 6.
// In the IPv4 form, a dst that is not IPv4 is written as zeros.
func (h CMAHeader) Encode(src, dst netip.Addr, port uint16) {
	_ = h[CMAHeaderSize-1]
	h[0] = 0
	if src.Unmap().Is4() {
		h[1] = 4 << 4
		binary.BigEndian.PutUint16(h[2:], port)
		clear(h[4:16])
		s := src.Unmap().As4()
		copy(h[16:20], s[:])
		clear(h[20:36])
		if d := dst.Unmap(); d.Is4() {
			d4 := d.As4()
			copy(h[32:36], d4[:])
		}
		return
	}
	h[1] = 6 << 4
	binary.BigEndian.PutUint16(h[2:], port)
	s := src.As16()
	copy(h[4:20], s[:])
	d := dst.As16()
	copy(h[20:36], d[:])
}

// Check reports whether the passive side's kernel accepts the header
// (cma.c cma_save_ip_info): version 0 (else ErrCMAVersion) and IP version 4
// or 6 (else ErrCMAIPVersion). Like the kernel it ignores the low nibble of
// byte 1 and the 12 bytes before an IPv4 address. A view shorter than
// CMAHeaderSize gives ErrShort.
func (h CMAHeader) Check() error {
	switch {
	case len(h) < CMAHeaderSize:
		return ErrShort
	case h.Version() != 0:
		return fmt.Errorf("version %d: %w", h.Version(), ErrCMAVersion)
	case h.IPVersion() != 4 && h.IPVersion() != 6:
		return fmt.Errorf("IP version %d: %w", h.IPVersion(), ErrCMAIPVersion)
	}
	return nil
}
