//go:build linux

package xdp

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/link"
)

// ethOverhead is what a frame adds to the MTU: Ethernet header and one
// 802.1Q tag (no FCS).
const ethOverhead = 14 + 4

// Device is the set of AF_XDP sockets Open made on one interface: one per
// queue, sharing one UMEM, fed by one XDP program.
//
// Concurrency: each Socket has its own owner goroutine (see Socket); the
// Device's methods may be called from any goroutine.
type Device struct {
	name    string
	index   int
	attach  string // how the program is attached, "" if the caller owns it
	um      *umem
	sockets []*Socket

	// mu guards prog and steer against Close.
	mu    sync.Mutex
	prog  *bpf.Program // ours to close, nil when Config.Steering was given
	steer Steering

	closeOnce sync.Once
	closeErr  error
}

// Open opens AF_XDP sockets on the interface ifname, one per queue of
// cfg.Queues, over one shared UMEM, and steers RoCE v2 frames to them. Unless
// cfg.Steering is given, it loads package bpf's program (the multi-buffer
// variant when the MTU needs it) and attaches it to the interface.
//
// Open must run in the network namespace of the interface, on a locked OS
// thread if the process uses several namespaces (for example inside
// internal/netns' Host.Do). If it fails, it leaves nothing behind.
func Open(ifname string, cfg Config) (_ *Device, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	fs, hr := cfg.FrameSize, cfg.Headroom
	maxFrame := ifi.MTU + ethOverhead
	rxRoom := fs - hr - unix.XDP_PACKET_HEADROOM
	sg := cfg.Frags || maxFrame > rxRoom
	slotChunks := (hr + maxFrame + fs - 1) / fs
	if slotChunks > 255 {
		return nil, fmt.Errorf("xdp: MTU %d too large for %d-byte frames", ifi.MTU, fs)
	}
	maxQueue := 0
	for _, q := range cfg.Queues {
		maxQueue = max(maxQueue, q)
	}

	d := &Device{name: ifname, index: ifi.Index, steer: cfg.Steering}
	defer func() {
		if err != nil {
			d.Close()
			err = fmt.Errorf("xdp: open %s: %w", ifname, err)
		}
	}()

	raiseMemlock()
	if d.steer == nil {
		prog, err := bpf.Load(bpf.Options{Frags: sg, MaxQueues: max(bpf.DefaultMaxQueues, maxQueue+1)})
		if err != nil {
			return nil, bpfError(err)
		}
		d.prog, d.steer = prog, prog
		want := bpf.ModeNone
		switch cfg.Attach {
		case AttachDriver:
			want = bpf.ModeDriver
		case AttachGeneric:
			want = bpf.ModeGeneric
		}
		mode, err := prog.AttachWithMode(ifi.Index, want)
		if err != nil {
			return nil, bpfError(err)
		}
		d.attach = mode.String()
	}

	perSocket := cfg.RxFrames + cfg.TxFrames*slotChunks
	d.um, err = newUMEM(perSocket*len(cfg.Queues), fs, hr)
	if err != nil {
		return nil, err
	}
	for i, q := range cfg.Queues {
		p := socketParams{
			info: link.Info{
				Kind:     "af_xdp",
				Name:     ifname,
				Index:    ifi.Index,
				Queue:    q,
				MAC:      ifi.HardwareAddr,
				MTU:      ifi.MTU,
				MaxFrame: maxFrame,
			},
			um:         d.um,
			sharedFD:   -1,
			mode:       cfg.Mode,
			sg:         sg,
			ringSize:   uint32(cfg.RingSize),
			first:      uint32(i * perSocket),
			rxFrames:   uint32(cfg.RxFrames),
			txSlots:    uint32(cfg.TxFrames),
			slotChunks: uint32(slotChunks),
			linBuffers: uint32(cfg.LinearBuffers),
			busyPoll:   cfg.BusyPoll,
			busyBudget: cfg.BusyPollBudget,
			busyWait:   max(cfg.BusyRetry, 0),
			spin:       cfg.Spin,
		}
		if i > 0 {
			p.sharedFD = d.sockets[0].fd
		}
		s, err := newSocket(p)
		if err != nil {
			return nil, err
		}
		d.sockets = append(d.sockets, s)
		if err := d.steer.SetSocket(q, s.fd); err != nil {
			return nil, bpfError(err)
		}
		s.dev = d
	}
	return d, nil
}

// bpfError adds this package's sentinel to an error from package bpf.
func bpfError(err error) error {
	switch {
	case errors.Is(err, unix.ERANGE):
		return fmt.Errorf("%w: %w", ErrMTU, err)
	case errors.Is(err, bpf.ErrPermission), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case errors.Is(err, bpf.ErrNoBPF), errors.Is(err, bpf.ErrNoXDP), errors.Is(err, bpf.ErrNoFrags):
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return err
}

// Sockets returns the sockets, in the order of Config.Queues.
func (d *Device) Sockets() []*Socket { return d.sockets }

// Links returns the sockets as link.Links, in the order of Config.Queues.
func (d *Device) Links() []link.Link {
	l := make([]link.Link, len(d.sockets))
	for i, s := range d.sockets {
		l[i] = s
	}
	return l
}

// AttachMode says how Open attached the XDP program: "driver" or "generic",
// or "" when the caller supplied Config.Steering.
func (d *Device) AttachMode() string { return d.attach }

// Program returns the XDP program Open loaded and attached, for example to
// inject loss with its SetLoss or read its Counters; nil when the caller
// supplied Config.Steering, or after Close. The Device still owns it: do
// not Close or Detach it.
func (d *Device) Program() *bpf.Program {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prog
}

// clearSocket removes queue's XSKMAP entry (called by Socket.Close).
func (d *Device) clearSocket(queue int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.steer == nil {
		return nil
	}
	return d.steer.ClearSocket(queue)
}

// Close closes every socket (and its XSKMAP entry), unmaps the UMEM and
// detaches and closes the XDP program if Open loaded it. It is idempotent.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		var errs []error
		for _, s := range d.sockets {
			errs = append(errs, s.Close())
		}
		if d.um != nil {
			errs = append(errs, d.um.unref())
		}
		d.mu.Lock()
		if d.prog != nil {
			errs = append(errs, d.prog.Close())
		}
		d.prog, d.steer = nil, nil
		d.mu.Unlock()
		d.closeErr = errors.Join(errs...)
	})
	return d.closeErr
}

// Available reports whether this process can create AF_XDP sockets: nil, or
// an error wrapping ErrNotSupported (no AF_XDP in the kernel) or
// ErrPermission. A caller can use it to choose the af_packet link instead.
// It does not check the driver or the XDP program; Open does.
func Available() error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return classify("xdp: create AF_XDP socket", err)
	}
	unix.Close(fd)
	return nil
}

// RxQueues returns the number of receive queues of the interface ifname
// that a socket can bind to, for a Config.Queues that covers them all: the
// driver's channels (ETHTOOL_GCHANNELS: receive-only plus combined), which
// are the queues in use, or else rtnetlink's IFLA_NUM_RX_QUEUES, the
// queues allocated (a veth allocates one per possible CPU and uses one
// unless told otherwise: binding to the others fails). Like Open it must
// run in the interface's network namespace.
func RxQueues(ifname string) (int, error) {
	if n, err := channels(ifname); err == nil && n > 0 {
		return n, nil
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("xdp: look up %s: %w", ifname, err)
	}
	return l.Attrs().NumRxQueues, nil
}

// ethtoolChannels is struct ethtool_channels (linux/ethtool.h).
type ethtoolChannels struct {
	cmd                                         uint32
	maxRx, maxTx, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with ifr_data set, for SIOCETHTOOL.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // the rest of the union
}

// channels returns the receive-only plus combined channels of ifname.
func channels(ifname string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if len(ifname) >= unix.IFNAMSIZ {
		return 0, unix.EINVAL
	}
	ch := &ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	ifr := &ifreqData{data: unsafe.Pointer(ch)}
	copy(ifr.name[:], ifname)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
	runtime.KeepAlive(ifr)
	if e != 0 {
		return 0, e
	}
	return int(ch.rxCount + ch.combinedCount), nil
}
