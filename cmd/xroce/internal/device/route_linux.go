//go:build linux

package device

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// RouteInterface names the interface of the route to ip.
func RouteInterface(ip netip.Addr) (string, error) {
	routes, err := netlink.RouteGet(net.IP(ip.Unmap().AsSlice()))
	if err != nil || len(routes) == 0 {
		return "", fmt.Errorf("no route to %v: %v", ip, err)
	}
	l, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return "", fmt.Errorf("route to %v: %w", ip, err)
	}
	return l.Attrs().Name, nil
}
