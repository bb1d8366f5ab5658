package conform

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/xroce/xroce/afpacket"
	"github.com/xroce/xroce/internal/pcaptap"
	"github.com/xroce/xroce/link"
)

// openPuppetLink opens the puppet's AF_PACKET socket on ifname, recording
// every frame to pcapFile when it is set. The kernel keeps its own
// traffic (the TCP exchange, ARP) beside it.
func openPuppetLink(ifname, pcapFile string) (*puppetLink, error) {
	nl, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	l, err := afpacket.Open(ifname, afpacket.Config{})
	if err != nil {
		return nil, fmt.Errorf("puppet socket on %s: %w", ifname, err)
	}
	p := &puppetLink{link: l, flush: func() error { return nil }, close: func() { l.Close() }}
	copy(p.mac[:], nl.HardwareAddr)
	if pcapFile != "" {
		f, err := os.Create(pcapFile)
		if err != nil {
			l.Close()
			return nil, err
		}
		rec, err := pcaptap.New(f, pcaptap.Config{})
		if err != nil {
			f.Close()
			l.Close()
			return nil, err
		}
		rec.Enable(0)
		p.link = link.Link(pcaptap.Wrap(l, rec, ifname, pcaptap.Both))
		p.flush = func() error {
			if err := rec.Flush(); err != nil {
				return err
			}
			return f.Sync()
		}
		p.close = func() { rec.Flush(); f.Close(); l.Close() }
	}
	return p, nil
}

// neighborMAC returns the kernel's neighbour entry for ip on ifname (the
// TCP exchange with the server made it, or it is permanent).
func neighborMAC(ifname string, ip netip.Addr) ([6]byte, error) {
	var mac [6]byte
	nl, err := netlink.LinkByName(ifname)
	if err != nil {
		return mac, err
	}
	fam := netlink.FAMILY_V4
	if !ip.Is4() {
		fam = netlink.FAMILY_V6
	}
	ns, err := netlink.NeighList(nl.Attrs().Index, fam)
	if err != nil {
		return mac, fmt.Errorf("neighbours of %s: %w", ifname, err)
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip && len(n.HardwareAddr) == 6 {
			copy(mac[:], n.HardwareAddr)
			return mac, nil
		}
	}
	return mac, fmt.Errorf("no neighbour entry for %v on %s (is %s the interface towards it?)", ip, ifname, ifname)
}
