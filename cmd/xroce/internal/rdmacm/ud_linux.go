//go:build linux

package rdmacm

import (
	"net/netip"

	"github.com/xroce/xroce/roce"
)

// GRHSize is the room for the GRH before a UD receive's data.
const GRHSize = 40

// UDReplyAV is ibv_create_ah_from_wc on RoCE: the address vector
// back to the sender of the receive wc whose GRH area is grh (an IPv6
// header, or 20 bytes then an IPv4 header): to the sender's MAC and
// address, from the address it was sent to (which must be one of gids)
// and mac, with the hop limit and traffic class it came with. ok is false
// where ibv_create_ah_from_wc fails: a failed completion, no GRH, a
// multicast destination or one not of gids.
func UDReplyAV(grh []byte, wc *roce.WC, gids []netip.Addr, mac []byte) (av roce.AddressVector, ok bool) {
	if wc.Status != roce.WCSuccess || wc.Flags&roce.WCWithGRH == 0 || len(grh) < GRHSize {
		return av, false
	}
	switch {
	case grh[20]>>4 == 4:
		ip := grh[20:]
		av.TrafficClass, av.HopLimit = ip[1], ip[8]
		av.DstIP = netip.AddrFrom4([4]byte(ip[12:16]))
		av.SrcIP = netip.AddrFrom4([4]byte(ip[16:20]))
		if av.SrcIP.IsMulticast() {
			return av, false
		}
	case grh[0]>>4 == 6:
		flow := uint32(grh[0])<<24 | uint32(grh[1])<<16 | uint32(grh[2])<<8 | uint32(grh[3])
		av.TrafficClass, av.FlowLabel, av.HopLimit = uint8(flow>>20), flow&0xfffff, grh[7]
		av.DstIP = netip.AddrFrom16([16]byte(grh[8:24])).Unmap()
		av.SrcIP = netip.AddrFrom16([16]byte(grh[24:40])).Unmap()
	default:
		return av, false
	}
	local := false
	for _, g := range gids {
		local = local || g.Unmap().WithZone("") == av.SrcIP
	}
	if !local {
		return av, false
	}
	av.DstMAC = wc.SrcMAC
	copy(av.SrcMAC[:], mac)
	return av, true
}
