package roce

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/xroce/xroce/afpacket"
	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/xdp"
)

// Open opens a RoCE v2 device on the network interface ifname: AF_XDP
// sockets, one per queue, with package bpf's XDP program steering RoCE
// frames to them (unless cfg.XDP.Steering is given), or when AF_XDP is not
// available (or cfg.Datapath asks for it) one AF_PACKET socket. Info says
// which datapath and mode it got. The GID table is made from the
// interface's addresses (cfg.Addrs overrides them).
//
// Open must run in the interface's network namespace, on a locked OS
// thread if the process uses several (internal/netns' Host.Do does that);
// the device keeps working from any goroutine afterwards. If it fails it
// leaves nothing behind.
func Open(ifname string, cfg Config) (_ *Device, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	nl, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	if len(cfg.Addrs) == 0 {
		addrs, err := netlink.AddrList(nl, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("roce: open %s: addresses: %w", ifname, err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				cfg.Addrs = append(cfg.Addrs, ip.Unmap())
			}
		}
	}
	nq := cfg.Queues
	if nq == 0 {
		nq = max(min(nl.Attrs().NumRxQueues, 64), 1)
	}

	var (
		links    []link.Link
		closer   io.Closer
		datapath string
		attach   string
		fallback string
	)
	if cfg.Datapath != DatapathAFPacket {
		err := xdp.Available()
		if err == nil {
			xc := cfg.XDP
			xc.Queues = make([]int, nq)
			for i := range xc.Queues {
				xc.Queues[i] = i
			}
			var dev *xdp.Device
			dev, err = xdp.Open(ifname, xc)
			if err == nil {
				links, closer, datapath, attach = dev.Links(), dev, DatapathXDP, dev.AttachMode()
			}
		}
		if err != nil {
			if cfg.Datapath == DatapathXDP {
				return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
			}
			fallback = err.Error()
		}
	}
	if links == nil {
		l, err := afpacket.Open(ifname, cfg.AFPacket)
		if err != nil {
			if fallback != "" {
				return nil, fmt.Errorf("roce: open %s: %w: af_xdp: %s; af_packet: %w", ifname, ErrNoDatapath, fallback, err)
			}
			return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
		}
		links, closer, datapath = []link.Link{l}, l, DatapathAFPacket
	}
	defer func() {
		if err != nil {
			closer.Close()
		}
	}()
	d, err := newDevice(links, closer, cfg, datapath)
	if err != nil {
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	d.info.Attach, d.info.Fallback = attach, fallback
	if err := d.res.open(nl.Attrs().Index); err != nil {
		d.Close()
		return nil, fmt.Errorf("roce: open %s: %w", ifname, err)
	}
	return d, nil
}

// XDPProgram returns the XDP program Open loaded for the AF_XDP datapath,
// for example to inject loss with its SetLoss or read its Counters; nil for
// other datapaths or when Config.XDP.Steering is the caller's. The device
// owns it: do not Close or Detach it.
func (d *Device) XDPProgram() *bpf.Program {
	if x, ok := d.closer.(*xdp.Device); ok {
		return x.Program()
	}
	return nil
}
