package bpf

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xroce/xroce/internal/netns"
	"golang.org/x/sys/unix"
)

// Netlink's report of how XDP is attached (IFLA_XDP_ATTACHED).
const (
	xdpAttachedNone = 0
	xdpAttachedDrv  = 1
	xdpAttachedSKB  = 2
)

// xdpState reads the interface's XDP attachment from rtnetlink inside h's
// namespace.
func xdpState(t *testing.T, h *netns.Host) (attached, progID uint32) {
	t.Helper()
	err := h.Do(func() error {
		l, err := netlink.LinkByIndex(h.Index)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil {
			attached, progID = x.AttachMode, x.ProgId
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read xdp state of %s: %v", h.Ifname, err)
	}
	return attached, progID
}

func progID(t *testing.T, p *Program) uint32 {
	t.Helper()
	info, err := p.prog.Info()
	if err != nil {
		t.Fatalf("program info: %v", err)
	}
	id, ok := info.ID()
	if !ok {
		t.Skip("kernel does not report program ids")
	}
	return uint32(id)
}

// attachIn attaches p inside h's namespace, where h.Index is valid.
func attachIn(h *netns.Host, p *Program, mode AttachMode) (AttachMode, error) {
	var got AttachMode
	err := h.Do(func() error {
		var err error
		got, err = p.AttachWithMode(h.Index, mode)
		return err
	})
	return got, err
}

func TestAttachVeth(t *testing.T) {
	pair := netns.NewT(t, netns.Config{})
	p := loadT(t, Options{})
	id := progID(t, p)

	if a, _ := xdpState(t, pair.A); a != xdpAttachedNone {
		t.Fatalf("fresh veth has xdp attached (%d)", a)
	}
	mode, err := attachIn(pair.A, p, ModeNone)
	if err != nil {
		t.Fatalf("Attach(%s): %v", pair.A.Ifname, err)
	}
	if mode != ModeDriver {
		t.Errorf("Attach on veth: mode %s, want driver (veth has native XDP)", mode)
	}
	if p.Mode() != mode || p.Ifindex() != pair.A.Index {
		t.Errorf("Mode(), Ifindex() = %s, %d; want %s, %d", p.Mode(), p.Ifindex(), mode, pair.A.Index)
	}
	if a, got := xdpState(t, pair.A); a != xdpAttachedDrv || got != id {
		t.Errorf("after Attach: netlink says attached %d prog %d, want %d prog %d", a, got, xdpAttachedDrv, id)
	}
	if a, _ := xdpState(t, pair.B); a != xdpAttachedNone {
		t.Errorf("peer %s has xdp attached (%d)", pair.B.Ifname, a)
	}

	if _, err := attachIn(pair.A, p, ModeNone); !errors.Is(err, ErrAttached) {
		t.Errorf("second Attach: %v, want ErrAttached", err)
	}
	// A second program cannot take the interface while ours holds it.
	other := loadT(t, Options{})
	if _, err := attachIn(pair.A, other, ModeDriver); err == nil {
		t.Errorf("another program attached over ours")
	}

	for i := 0; i < 2; i++ {
		if err := p.Detach(); err != nil {
			t.Fatalf("Detach #%d: %v", i+1, err)
		}
	}
	if a, _ := xdpState(t, pair.A); a != xdpAttachedNone {
		t.Errorf("after Detach: netlink says attached %d", a)
	}
	if p.Mode() != ModeNone || p.Ifindex() != 0 {
		t.Errorf("after Detach: Mode(), Ifindex() = %s, %d", p.Mode(), p.Ifindex())
	}

	// Reattach, in generic mode this time, then Close detaches.
	if mode, err := attachIn(pair.A, p, ModeGeneric); err != nil || mode != ModeGeneric {
		t.Fatalf("AttachWithMode(generic): %s, %v", mode, err)
	}
	if a, got := xdpState(t, pair.A); a != xdpAttachedSKB || got != id {
		t.Errorf("generic attach: netlink says attached %d prog %d, want %d prog %d", a, got, xdpAttachedSKB, id)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if a, _ := xdpState(t, pair.A); a != xdpAttachedNone {
		t.Errorf("after Close: netlink says attached %d", a)
	}
}

func TestAttachBadIfindex(t *testing.T) {
	pair := netns.NewT(t, netns.Config{})
	p := loadT(t, Options{})
	for _, idx := range []int{0, -1, 1 << 20} {
		var mode AttachMode
		err := pair.A.Do(func() error {
			var err error
			mode, err = p.Attach(idx)
			return err
		})
		if err == nil || mode != ModeNone {
			t.Errorf("Attach(%d) = %s, %v; want an error", idx, mode, err)
		}
	}
	if p.Mode() != ModeNone {
		t.Errorf("Mode() after failed attaches = %s", p.Mode())
	}
}

// TestAttachJumbo checks that a veth with a 9000-byte MTU refuses the plain
// program in driver mode (ERANGE, with a hint to use frags) and takes the
// frags variant.
func TestAttachJumbo(t *testing.T) {
	pair := netns.NewT(t, netns.Config{MTU: 9000})
	plain := loadT(t, Options{})
	_, err := attachIn(pair.A, plain, ModeDriver)
	if err == nil {
		t.Fatalf("plain program attached in driver mode to a veth with MTU 9000")
	}
	if !errors.Is(err, unix.ERANGE) || !strings.Contains(err.Error(), "Frags") {
		t.Errorf("plain attach at MTU 9000: %v; want ERANGE and a hint about Options.Frags", err)
	}

	frags := loadT(t, Options{Frags: true})
	mode, err := attachIn(pair.A, frags, ModeNone)
	if err != nil || mode != ModeDriver {
		t.Fatalf("frags program at MTU 9000: %s, %v; want driver mode", mode, err)
	}
	if err := frags.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestSteeringVeth sends real datagrams from B to A with the program attached
// on A. With queue 0's XSKMAP slot empty every datagram reaches A's kernel
// UDP sockets (the XDP_PASS fallback). With an AF_XDP socket in the slot the
// program redirects the RoCE datagrams to it; that socket is not bound, so
// the kernel drops them at the redirect, and they vanish from the UDP stack
// while datagrams to another port keep arriving. The xdp package's tests
// receive them on a bound socket.
func TestSteeringVeth(t *testing.T) {
	pair := netns.NewT(t, netns.Config{})
	p := loadT(t, Options{})
	if _, err := attachIn(pair.A, p, ModeDriver); err != nil {
		t.Fatalf("Attach: %v", err)
	}

	listen := func(port int) *net.UDPConn {
		var c *net.UDPConn
		err := pair.A.Do(func() error {
			var err error
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(pair.A.IP, uint16(port))))
			return err
		})
		if err != nil {
			t.Fatalf("listen on %s:%d: %v", pair.A.IP, port, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	roce, other := listen(RoCEv2Port), listen(RoCEv2Port+1)

	var tx *net.UDPConn
	if err := pair.B.Do(func() error {
		var err error
		tx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(pair.B.IP, 0)))
		return err
	}); err != nil {
		t.Fatalf("sender socket: %v", err)
	}
	t.Cleanup(func() { tx.Close() })

	// send sends n datagrams to port and counts how many arrive on c
	// within wait: for datagrams that must all arrive, a bound only a
	// hang reaches; for ones that must not, a short look.
	const all, none = 30 * time.Second, 300 * time.Millisecond
	send := func(c *net.UDPConn, port, n int, wait time.Duration) int {
		dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(pair.A.IP, uint16(port)))
		msg := make([]byte, 64)
		for i := 0; i < n; i++ {
			msg[0] = byte(i)
			if _, err := tx.WriteToUDP(msg, dst); err != nil {
				t.Fatalf("send to %v: %v", dst, err)
			}
		}
		got := 0
		buf := make([]byte, 256)
		deadline := time.Now().Add(wait)
		for got < n {
			c.SetReadDeadline(deadline)
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				break
			}
			got++
		}
		return got
	}
	const n = 20

	if got := send(roce, RoCEv2Port, n, all); got != n {
		t.Errorf("empty slot: %d of %d RoCE datagrams reached the kernel, want all (XDP_PASS fallback)", got, n)
	}

	if err := p.SetSocket(0, xskT(t)); err != nil {
		t.Fatalf("SetSocket: %v", err)
	}
	if got := send(roce, RoCEv2Port, n, none); got != 0 {
		t.Errorf("socket in slot: %d of %d RoCE datagrams reached the kernel, want 0 (redirected)", got, n)
	}
	if got := send(other, RoCEv2Port+1, n, all); got != n {
		t.Errorf("socket in slot: %d of %d datagrams to port %d arrived, want all", got, n, RoCEv2Port+1)
	}

	if err := p.ClearSocket(0); err != nil {
		t.Fatalf("ClearSocket: %v", err)
	}
	if got := send(roce, RoCEv2Port, n, all); got != n {
		t.Errorf("slot cleared: %d of %d RoCE datagrams reached the kernel, want all", got, n)
	}
}
