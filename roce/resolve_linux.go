package roce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// resolver finds the Ethernet address of a peer through the kernel: the
// route to it (netlink RTM_GETROUTE), then the neighbour entry of its next
// hop (RTM_GETNEIGH), triggering ARP or NDP with a UDP datagram when the
// entry is missing. Its sockets were opened in the device's network
// namespace, so it works from any goroutine.
type resolver struct {
	static  map[netip.Addr]net.HardwareAddr
	nl      *netlink.Handle
	udp4    *net.UDPConn
	udp6    *net.UDPConn
	ifindex int
}

// open makes the netlink handle and trigger sockets, in the calling
// thread's network namespace.
func (r *resolver) open(ifindex int) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	r.nl, r.ifindex = h, ifindex
	r.udp4, _ = net.ListenUDP("udp4", nil)
	r.udp6, _ = net.ListenUDP("udp6", nil)
	return nil
}

func (r *resolver) close() error {
	if r.nl != nil {
		r.nl.Close()
		r.nl = nil
	}
	var errs []error
	for _, c := range []*net.UDPConn{r.udp4, r.udp6} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	r.udp4, r.udp6 = nil, nil
	return errors.Join(errs...)
}

// Resolve returns the address vector to reach dst (an IPv4, IPv4-mapped or
// IPv6 address) from this device: source and destination MAC and IP. It
// consults Config.Neighbors, then the kernel's routing table and neighbour
// cache, asking the kernel to resolve (ARP/NDP) a missing entry and waiting
// up to Config.ResolveTimeout. It fails with an error wrapping
// ErrUnreachable when there is no route through this device or the
// neighbour does not answer.
func (d *Device) Resolve(ctx context.Context, dst netip.Addr) (AddressVector, error) {
	dst = dst.Unmap().WithZone("")
	av := AddressVector{DstIP: dst}
	copy(av.SrcMAC[:], d.info.MAC)
	for _, a := range d.local {
		if a.Is4() == dst.Is4() && !a.IsLinkLocalUnicast() {
			av.SrcIP = a
			break
		}
	}
	if mac, ok := d.res.static[dst]; ok && len(mac) == 6 {
		copy(av.DstMAC[:], mac)
		if !av.SrcIP.IsValid() {
			return av, fmt.Errorf("resolve %v: no local address of its family: %w", dst, ErrUnreachable)
		}
		return av, nil
	}
	r := &d.res
	if r.nl == nil {
		return av, fmt.Errorf("resolve %v: no neighbour entry and no kernel to ask: %w", dst, ErrUnreachable)
	}
	hop := dst
	if dst.Is6() && dst.IsLinkLocalUnicast() {
		// On the link by definition: no route to look up; the source
		// is the device's link-local GID.
		av.SrcIP = netip.Addr{}
		for _, a := range d.local {
			if a.Is6() && a.IsLinkLocalUnicast() {
				av.SrcIP = a
				break
			}
		}
	} else {
		routes, err := r.nl.RouteGet(net.IP(dst.AsSlice()))
		if err != nil || len(routes) == 0 {
			return av, fmt.Errorf("resolve %v: no route: %w: %v", dst, ErrUnreachable, err)
		}
		rt := routes[0]
		if rt.LinkIndex != r.ifindex {
			return av, fmt.Errorf("resolve %v: route goes through interface %d, not %s: %w", dst, rt.LinkIndex, d.info.Name, ErrUnreachable)
		}
		if src, ok := netip.AddrFromSlice(rt.Src); ok && src.IsValid() {
			av.SrcIP = src.Unmap()
		}
		if gw, ok := netip.AddrFromSlice(rt.Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
			hop = gw.Unmap()
		}
	}
	if !av.SrcIP.IsValid() {
		return av, fmt.Errorf("resolve %v: no source address: %w", dst, ErrUnreachable)
	}
	family := unix.AF_INET
	if hop.Is6() {
		family = unix.AF_INET6
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ResolveTimeout)
	defer cancel()
	triggered := false
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		neighs, err := r.nl.NeighList(r.ifindex, family)
		if err != nil {
			return av, fmt.Errorf("resolve %v: neighbour list: %w", dst, err)
		}
		failed := false
		for _, n := range neighs {
			ip, _ := netip.AddrFromSlice(n.IP)
			if ip.Unmap() != hop {
				continue
			}
			const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
			if n.State&usable != 0 && len(n.HardwareAddr) == 6 {
				copy(av.DstMAC[:], n.HardwareAddr)
				return av, nil
			}
			failed = n.State&netlink.NUD_FAILED != 0
		}
		if failed && triggered {
			return av, fmt.Errorf("resolve %v: next hop %v does not answer ARP/NDP: %w", dst, hop, ErrUnreachable)
		}
		if !triggered {
			// A datagram to the discard port makes the kernel resolve
			// the next hop (and queue it until then).
			c := r.udp4
			if hop.Is6() {
				c = r.udp6
			}
			if c != nil {
				to := dst
				if to.Is6() && to.IsLinkLocalUnicast() {
					// A numeric zone: a name would be looked up in the
					// calling thread's namespace, not the device's.
					to = to.WithZone(strconv.Itoa(r.ifindex))
				}
				c.WriteToUDPAddrPort([]byte{0}, netip.AddrPortFrom(to, 9))
			}
			triggered = true
		}
		select {
		case <-ctx.Done():
			return av, fmt.Errorf("resolve %v: next hop %v: %w: %w", dst, hop, ErrUnreachable, ctx.Err())
		case <-tick.C:
		}
	}
}
