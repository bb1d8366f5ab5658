package roce

import (
	"context"
	"fmt"
	"net/netip"
)

// A Resolver finds where frames for a peer go when Config.Neighbors does
// not say: the Ethernet address of the next hop towards dst (an IPv4 or
// IPv6 address, never IPv4-mapped) and, when the route prefers one, the
// source address. It may send (an ARP or NDP request, say) and wait until
// ctx is done. It fails with an error wrapping ErrUnreachable when there
// is no route through the device or the next hop does not answer. Device
// calls it from any goroutine. Package nic supplies one that asks the
// kernel.
type Resolver interface {
	Resolve(ctx context.Context, dst netip.Addr) (NextHop, error)
}

// NextHop is a Resolver's answer.
type NextHop struct {
	MAC [6]byte    // the next hop's Ethernet address
	Src netip.Addr // the route's preferred source address; invalid: the device picks one
}

// Resolve returns the address vector to reach dst (an IPv4, IPv4-mapped or
// IPv6 address) from this device: source and destination MAC and IP. It
// consults Config.Neighbors, then Config.Resolver, waiting for it up to
// Config.ResolveTimeout. The source IP is the route's preferred one, else
// the device's link-local GID for a link-local dst, else the device's
// first address of dst's family. It fails with an error wrapping
// ErrUnreachable when neither knows dst.
func (d *Device) Resolve(ctx context.Context, dst netip.Addr) (AddressVector, error) {
	dst = dst.Unmap().WithZone("")
	av := AddressVector{DstIP: dst, SrcIP: d.source(dst)}
	copy(av.SrcMAC[:], d.info.MAC)
	if mac, ok := d.cfg.Neighbors[dst]; ok && len(mac) == 6 {
		copy(av.DstMAC[:], mac)
		if !av.SrcIP.IsValid() {
			return av, fmt.Errorf("resolve %v: no local address of its family: %w", dst, ErrUnreachable)
		}
		return av, nil
	}
	if d.cfg.Resolver == nil {
		return av, fmt.Errorf("resolve %v: no neighbour entry and no resolver: %w", dst, ErrUnreachable)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ResolveTimeout)
	defer cancel()
	hop, err := d.cfg.Resolver.Resolve(ctx, dst)
	if err != nil {
		return av, fmt.Errorf("resolve %v: %w", dst, err)
	}
	if hop.Src.IsValid() {
		av.SrcIP = hop.Src.Unmap()
	}
	if !av.SrcIP.IsValid() {
		return av, fmt.Errorf("resolve %v: no source address: %w", dst, ErrUnreachable)
	}
	av.DstMAC = hop.MAC
	return av, nil
}

// source is the device's address to send to dst from when no route says:
// its link-local GID for a link-local IPv6 dst (on the link by
// definition), else its first address of dst's family that is not
// link-local; invalid when it has none.
func (d *Device) source(dst netip.Addr) netip.Addr {
	ll := dst.Is6() && dst.IsLinkLocalUnicast()
	for _, a := range d.local {
		if a.Is4() == dst.Is4() && a.IsLinkLocalUnicast() == ll {
			return a
		}
	}
	return netip.Addr{}
}
