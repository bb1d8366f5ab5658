//go:build linux

package device

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/nic"
	"github.com/xroce/xroce/roce"
)

// MTUFromBytes returns the IB MTU of n bytes, 0 if n is not one.
func MTUFromBytes(n int) roce.MTU {
	for m := roce.MTU256; m <= roce.MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// LocalEndpoint describes q (if not nil) for its peer: QPN, a random PSN, the GID of
// index gid (< 0: the first IPv4-mapped one, else the link-local one) and
// the device's MTU.
func LocalEndpoint(dev *roce.Device, q *roce.QP, gid int) (roce.Endpoint, error) {
	e := roce.Endpoint{PSN: rand.Uint32() & 0xffffff, MTU: dev.Info().ActiveMTU}
	if q != nil {
		e.QPN = q.QPN()
	}
	if gid >= 0 {
		g, err := dev.GID(gid)
		if err != nil {
			return e, fmt.Errorf("-g %d: %w (the device has %d GIDs: %v)", gid, err, len(dev.GIDs()), dev.GIDs())
		}
		e.GID = g
		return e, nil
	}
	gids := dev.GIDs()
	for _, g := range gids {
		if g.Is4In6() {
			e.GID = g
			return e, nil
		}
	}
	if len(gids) == 0 {
		return e, fmt.Errorf("%s has no GID", dev.Info().Name)
	}
	e.GID = gids[0]
	return e, nil
}

// OpenDevice opens the RoCE device on ifname or, when it is empty, on the
// interface of the route to host (client) or the only interface with an
// address (server); see OpenNIC.
func OpenDevice(w io.Writer, ifname, host, cmd string) (*roce.Device, error) {
	return OpenDeviceConfig(w, ifname, host, cmd, roce.Config{})
}

// OpenDeviceConfig is OpenDevice with a device configuration.
func OpenDeviceConfig(w io.Writer, ifname, host, cmd string, cfg roce.Config) (*roce.Device, error) {
	d, err := OpenNICDevice(w, ifname, host, cmd, cfg)
	if err != nil {
		return nil, err
	}
	return d.Device, nil
}

// OpenNICDevice is OpenDeviceConfig returning the nic.Device, whose XDP
// program the caller may use (perf --mark-ce).
func OpenNICDevice(w io.Writer, ifname, host, cmd string, cfg roce.Config) (*nic.Device, error) {
	if ifname == "" {
		var err error
		if ifname, err = DefaultInterface(host); err != nil {
			return nil, base.Usagef("%s: %v; name one with -d INTERFACE", cmd, err)
		}
	}
	d, err := OpenNICNamed(w, cmd, ifname, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot open a RoCE device on %s: %w", cmd, ifname, err)
	}
	return d, nil
}

// OpenNIC opens a RoCE device on the interface ifname (nic.Open) and, when
// AF_XDP could not be used there and the device runs on AF_PACKET, says so
// and why on w, as cmd.
func OpenNIC(w io.Writer, cmd, ifname string, cfg roce.Config) (*roce.Device, error) {
	d, err := OpenNICNamed(w, cmd, ifname, cfg)
	if err != nil {
		return nil, err
	}
	return d.Device, nil
}

// OpenNICNamed is OpenNIC returning the nic.Device.
func OpenNICNamed(w io.Writer, cmd, ifname string, cfg roce.Config) (*nic.Device, error) {
	d, err := nic.Open(ifname, nic.Config{Device: cfg})
	if err != nil {
		return nil, err
	}
	if err := d.Fallback(); err != nil {
		fmt.Fprintf(w, "%s: %s: AF_XDP not available (%v); using AF_PACKET\n", cmd, ifname, err)
	}
	return d, nil
}

// DefaultInterface picks the interface for host: the one of the route to
// it, or without host the only one with an address.
func DefaultInterface(host string) (string, error) {
	if host != "" {
		ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		if err != nil || len(ips) == 0 {
			return "", fmt.Errorf("cannot resolve %s: %v", host, err)
		}
		return RouteInterface(ips[0])
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	var names []string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 || ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLinkLocalUnicast() {
				names = append(names, ifc.Name)
				break
			}
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("%d interfaces with an address (%v), cannot pick one", len(names), names)
	}
	return names[0], nil
}
