package nic

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

	"github.com/xroce/xroce/roce"
)

// Resolver finds the Ethernet address of a peer through the kernel, as a
// roce.Resolver: the route to it (netlink RTM_GETROUTE), then the
// neighbour entry of its next hop (RTM_GETNEIGH), triggering ARP or NDP
// with a UDP datagram when the entry is missing. Its sockets are opened in
// the network namespace of OpenResolver's caller, so it works from any
// goroutine afterwards.
type Resolver struct {
	nl      *netlink.Handle
	udp4    *net.UDPConn
	udp6    *net.UDPConn
	ifname  string
	ifindex int
}

// OpenResolver opens a Resolver for the interface ifname: a netlink socket
// and the UDP sockets that trigger ARP and NDP, in the calling thread's
// network namespace.
func OpenResolver(ifname string) (*Resolver, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	l, err := h.LinkByName(ifname)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("resolver: %w", err)
	}
	r := &Resolver{nl: h, ifname: ifname, ifindex: l.Attrs().Index}
	r.udp4, _ = net.ListenUDP("udp4", nil)
	r.udp6, _ = net.ListenUDP("udp6", nil)
	return r, nil
}

// Close closes the Resolver's sockets. It is idempotent.
func (r *Resolver) Close() error {
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

// Resolve implements roce.Resolver: the route to dst must go through the
// Resolver's interface (a link-local IPv6 dst is on it by definition),
// and the neighbour entry of the route's next hop gives the address. A
// missing entry is resolved by the kernel (ARP or NDP), which a datagram
// to dst's discard port sets off; Resolve then looks again every 5 ms
// until the entry is usable, fails, or ctx is done.
func (r *Resolver) Resolve(ctx context.Context, dst netip.Addr) (roce.NextHop, error) {
	var hop roce.NextHop
	if r.nl == nil {
		return hop, fmt.Errorf("resolver closed: %w", roce.ErrUnreachable)
	}
	next := dst
	if !dst.Is6() || !dst.IsLinkLocalUnicast() {
		routes, err := r.nl.RouteGet(net.IP(dst.AsSlice()))
		if err != nil || len(routes) == 0 {
			return hop, fmt.Errorf("no route: %w: %v", roce.ErrUnreachable, err)
		}
		rt := routes[0]
		if rt.LinkIndex != r.ifindex {
			return hop, fmt.Errorf("route goes through interface %d, not %s: %w", rt.LinkIndex, r.ifname, roce.ErrUnreachable)
		}
		if src, ok := netip.AddrFromSlice(rt.Src); ok && src.IsValid() {
			hop.Src = src.Unmap()
		}
		if gw, ok := netip.AddrFromSlice(rt.Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
			next = gw.Unmap()
		}
	}
	family := unix.AF_INET
	if next.Is6() {
		family = unix.AF_INET6
	}
	triggered := false
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		neighs, err := r.nl.NeighList(r.ifindex, family)
		if err != nil {
			return hop, fmt.Errorf("neighbour list: %w", err)
		}
		failed := false
		for _, n := range neighs {
			ip, _ := netip.AddrFromSlice(n.IP)
			if ip.Unmap() != next {
				continue
			}
			const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
			if n.State&usable != 0 && len(n.HardwareAddr) == 6 {
				copy(hop.MAC[:], n.HardwareAddr)
				return hop, nil
			}
			failed = n.State&netlink.NUD_FAILED != 0
		}
		if failed && triggered {
			return hop, fmt.Errorf("next hop %v does not answer ARP/NDP: %w", next, roce.ErrUnreachable)
		}
		if !triggered {
			r.trigger(dst, next.Is6())
			triggered = true
		}
		select {
		case <-ctx.Done():
			return hop, fmt.Errorf("next hop %v: %w: %w", next, roce.ErrUnreachable, ctx.Err())
		case <-tick.C:
		}
	}
}

// trigger sends a datagram to dst's discard port, which makes the kernel
// resolve the next hop (and queue the datagram until then).
func (r *Resolver) trigger(dst netip.Addr, v6 bool) {
	c := r.udp4
	if v6 {
		c = r.udp6
	}
	if c == nil {
		return
	}
	if dst.Is6() && dst.IsLinkLocalUnicast() {
		// A numeric zone: a name would be looked up in the calling
		// thread's namespace, not the resolver's.
		dst = dst.WithZone(strconv.Itoa(r.ifindex))
	}
	c.WriteToUDPAddrPort([]byte{0}, netip.AddrPortFrom(dst, 9))
}
