package nic

import (
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/xroce/xroce/afpacket"
	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/link"
	"github.com/xroce/xroce/roce"
	"github.com/xroce/xroce/xdp"
)

// Device is a roce.Device on a network interface, with what Open chose for
// it. Its Close (roce.Device.Close) closes the sockets, detaches the XDP
// program Open attached and closes the Resolver Open made.
type Device struct {
	*roce.Device
	attach   string
	fallback error
	xd       *xdp.Device // nil for AF_PACKET
}

// Attach says how the XDP program Open loaded is attached: "driver" or
// "generic"; "" for AF_PACKET or when Config.XDP.Steering is the caller's.
func (d *Device) Attach() string { return d.attach }

// Fallback returns why AF_XDP was not used when Open, asked for
// DatapathAuto, fell back to AF_PACKET; nil when it did not fall back.
func (d *Device) Fallback() error { return d.fallback }

// XDPProgram returns the XDP program Open loaded for the AF_XDP datapath,
// for example to inject loss with its SetLoss or read its Counters; nil for
// AF_PACKET or when Config.XDP.Steering is the caller's. The device owns
// it: do not Close or Detach it.
func (d *Device) XDPProgram() *bpf.Program {
	if d.xd == nil {
		return nil
	}
	return d.xd.Program()
}

// closers closes each of its members, in order.
type closers []io.Closer

func (c closers) Close() error {
	var errs []error
	for _, x := range c {
		errs = append(errs, x.Close())
	}
	return errors.Join(errs...)
}

// Open opens a RoCE v2 device on the network interface ifname: AF_XDP
// sockets, one per queue, with package bpf's XDP program steering RoCE
// frames to them (unless cfg.XDP.Steering is given), or one AF_PACKET
// socket when cfg.Datapath asks for it or, with DatapathAuto, when AF_XDP
// cannot be opened (Device.Fallback says why). The device's GID table is
// made from the interface's addresses (cfg.Device.Addrs overrides them),
// and it resolves peers through the kernel (cfg.Device.Resolver overrides
// that).
//
// Open must run in the interface's network namespace, on a locked OS
// thread if the process uses several (internal/netns' Host.Do does that);
// the device keeps working from any goroutine afterwards. If it fails it
// leaves nothing behind.
func Open(ifname string, cfg Config) (_ *Device, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("nic: open %s: %w", ifname, err)
		}
	}()
	switch {
	case cfg.Datapath != DatapathAuto && cfg.Datapath != DatapathXDP && cfg.Datapath != DatapathAFPacket:
		return nil, fmt.Errorf("unknown datapath %q: %w", cfg.Datapath, roce.ErrInvalid)
	case cfg.Queues < 0 || cfg.Queues > 64:
		return nil, fmt.Errorf("%d queues: %w", cfg.Queues, roce.ErrInvalid)
	}
	nl, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, err
	}
	dc := cfg.Device
	if dc.Spin == 0 {
		dc.Spin = cfg.XDP.Spin
	}
	if len(dc.Addrs) == 0 {
		addrs, err := netlink.AddrList(nl, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("addresses: %w", err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				dc.Addrs = append(dc.Addrs, ip.Unmap())
			}
		}
	}
	nq := cfg.Queues
	if nq == 0 {
		n, err := xdp.RxQueues(ifname)
		if err != nil {
			n = nl.Attrs().NumRxQueues
		}
		nq = max(min(n, 64), 1)
	}

	d := &Device{}
	var (
		links []link.Link
		owned closers
	)
	if cfg.Datapath != DatapathAFPacket {
		err := xdp.Available()
		if err == nil {
			xc := cfg.XDP
			xc.Queues = make([]int, nq)
			for i := range xc.Queues {
				xc.Queues[i] = i
			}
			d.xd, err = xdp.Open(ifname, xc)
		}
		switch {
		case err == nil:
			links, d.attach = d.xd.Links(), d.xd.AttachMode()
			owned = append(owned, d.xd)
		case cfg.Datapath == DatapathXDP:
			return nil, err
		default:
			d.fallback = err
		}
	}
	if links == nil {
		l, err := afpacket.Open(ifname, cfg.AFPacket)
		if err != nil {
			if d.fallback != nil {
				return nil, fmt.Errorf("%w: af_xdp: %w; af_packet: %w", ErrNoDatapath, d.fallback, err)
			}
			return nil, err
		}
		links = []link.Link{l}
		owned = append(owned, l)
	}
	if dc.Resolver == nil {
		r, err := OpenResolver(ifname)
		if err != nil {
			owned.Close()
			return nil, err
		}
		dc.Resolver = r
		owned = append(owned, r)
	}
	if dc.Closer != nil {
		owned = append(owned, dc.Closer)
	}
	dc.Closer = owned
	// NewDevice closes owned when it fails.
	if d.Device, err = roce.NewDevice(links, dc); err != nil {
		return nil, err
	}
	return d, nil
}
