//go:build linux

package xdp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/link"
)

// The tests in this file run real AF_XDP sockets on both ends of a veth pair
// between two network namespaces (internal/netns), in copy mode, with package
// bpf's program steering UDP port 4791 to the sockets. They need root and
// skip, saying why, without it.

const roceUDPPort = 4791

// openT opens a Device on h's veth end inside h's namespace, or skips the
// test when AF_XDP or the privileges are missing.
func openT(t testing.TB, h *netns.Host, cfg Config) *Device {
	t.Helper()
	var d *Device
	err := h.Do(func() error {
		var err error
		d, err = Open(h.Ifname, cfg)
		return err
	})
	if errors.Is(err, ErrNotSupported) || errors.Is(err, ErrPermission) {
		t.Skipf("cannot open AF_XDP here: %v", err)
	}
	if err != nil {
		t.Fatalf("Open(%s, %+v): %v", h.Ifname, cfg, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// pairT makes a namespace pair and opens a Device on each end.
func pairT(t testing.TB, ncfg netns.Config, cfg Config) (*netns.Pair, *Device, *Device) {
	t.Helper()
	p := netns.NewT(t, ncfg)
	return p, openT(t, p.A, cfg), openT(t, p.B, cfg)
}

// Frame layout of the RoCE-looking test frames: Ethernet | IPv4 (DF) |
// UDP (dst 4791, checksum 0) | BTH (UD SEND ONLY) | DETH | payload | ICRC
// slot. The payload starts with the sequence number and then a pattern
// derived from it, so the receiver can rebuild the whole expected frame.
const (
	ethLen   = 14
	ipLen    = 20
	udpLen   = 8
	hdrLen   = ethLen + ipLen + udpLen + 12 + 8
	minFrame = hdrLen + 8 + 4
)

// buildFrame writes frame seq of the given size from src to dst into b and
// returns b[:size].
func buildFrame(b []byte, src, dst *netns.Host, dport uint16, seq uint32, size int) []byte {
	b = b[:size]
	copy(b[0:6], dst.MAC)
	copy(b[6:12], src.MAC)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[ethLen:]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(size-ethLen))
	binary.BigEndian.PutUint16(ip[4:], uint16(seq))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = 64, 17
	ip[10], ip[11] = 0, 0
	s4, d4 := src.IP.As4(), dst.IP.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:ipLen]))
	udp := ip[ipLen:]
	binary.BigEndian.PutUint16(udp[0:], 0xc000|uint16(seq&0x3fff))
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-ethLen-ipLen))
	binary.BigEndian.PutUint16(udp[6:], 0)
	bth := udp[udpLen:]
	bth[0], bth[1] = 0x64, 0 // UD SEND ONLY
	binary.BigEndian.PutUint16(bth[2:], 0xffff)
	binary.BigEndian.PutUint32(bth[4:], 0x000011) // DestQP
	binary.BigEndian.PutUint32(bth[8:], seq&0xffffff)
	deth := bth[12:]
	binary.BigEndian.PutUint32(deth[0:], 0x11111111)
	binary.BigEndian.PutUint32(deth[4:], 0x000022)
	pl := b[hdrLen:]
	binary.BigEndian.PutUint32(pl, seq)
	x := seq*2654435761 + 1
	for i := 4; i < len(pl); i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		pl[i] = byte(x)
	}
	return b
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// eventually bounds a real-time wait for what must happen: long enough
// that only a hang, never a slow machine, reaches it.
const eventually = 30 * time.Second

// window bounds how many frames a test sender may have ahead of its
// receiver: AF_XDP has no flow control, and a copy-mode sender on veth can
// outrun a receiver sharing its CPU, which then drops for want of fill
// buffers (rx_fill_ring_empty_descs), as a NIC would.
const window = 128

// exchange sends frames of the given sizes from tx to rx and checks that
// they all arrive intact and in order, keeping at most window frames in
// flight.
func exchange(t testing.TB, tx, rx *Socket, src, dst *netns.Host, seq0 uint32, sizes []int) {
	t.Helper()
	exchangeW(t, tx, rx, src, dst, seq0, sizes, window)
}

// exchangeW is exchange with a window of w frames.
func exchangeW(t testing.TB, tx, rx *Socket, src, dst *netns.Host, seq0 uint32, sizes []int, w int) {
	t.Helper()
	var got atomic.Int64
	errc := make(chan error, 1)
	go func() { errc <- recvCheck(rx, src, dst, seq0, sizes, &got) }()
	sendAll(t, tx, src, dst, roceUDPPort, seq0, sizes, &got, w)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// sendAll transmits one frame of each size in sizes (numbered from seq0),
// retrying while the socket has no free buffers. With acked non-nil it
// stays within window frames of it.
func sendAll(t testing.TB, s *Socket, src, dst *netns.Host, dport uint16, seq0 uint32, sizes []int, acked *atomic.Int64, w int) {
	t.Helper()
	bufs := make([][]byte, 32)
	deadline := time.Now().Add(eventually)
	for i := 0; i < len(sizes); {
		if time.Now().After(deadline) {
			t.Fatalf("sent %d of %d frames before the deadline", i, len(sizes))
		}
		want := min(len(bufs), len(sizes)-i)
		if acked != nil {
			want = min(want, w-(i-int(acked.Load())))
		}
		n := 0
		if want > 0 {
			n = s.Alloc(bufs[:want])
		}
		if n == 0 {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if len(bufs[0]) != s.Info().MaxFrame {
			t.Fatalf("Alloc gave a %d-byte buffer, want MaxFrame %d", len(bufs[0]), s.Info().MaxFrame)
		}
		for j := range n {
			bufs[j] = buildFrame(bufs[j], src, dst, dport, seq0+uint32(i+j), sizes[i+j])
		}
		sent, err := s.Transmit(bufs[:n])
		if err != nil || sent != n {
			t.Fatalf("Transmit(%d frames) = %d, %v", n, sent, err)
		}
		i += n
	}
}

// recvCheck receives len(sizes) frames and checks every byte of each
// against the frame the sender built, counting them in progress if not nil.
func recvCheck(s *Socket, src, dst *netns.Host, seq0 uint32, sizes []int, progress *atomic.Int64) error {
	bufs := make([][]byte, 64)
	want := make([]byte, 16384)
	got := 0
	deadline := time.Now().Add(eventually)
	for got < len(sizes) {
		if time.Now().After(deadline) {
			return fmt.Errorf("received %d of %d frames before the deadline; stats %+v", got, len(sizes), s.Stats())
		}
		n, err := s.Receive(bufs, 100*time.Millisecond)
		if err != nil {
			return fmt.Errorf("Receive: %v", err)
		}
		for _, f := range bufs[:n] {
			if len(f) < minFrame {
				return fmt.Errorf("frame %d: %d bytes, too short", got, len(f))
			}
			seq := binary.BigEndian.Uint32(f[hdrLen:])
			if seq != seq0+uint32(got) {
				return fmt.Errorf("frame %d: sequence %d, want %d (lost or reordered); stats %+v", got, seq, seq0+uint32(got), s.Stats())
			}
			w := buildFrame(want, src, dst, roceUDPPort, seq, sizes[got])
			if !bytes.Equal(f, w) {
				return fmt.Errorf("frame %d (%d bytes, want %d): contents differ at byte %d", got, len(f), len(w), firstDiff(f, w))
			}
			got++
		}
		s.Release(bufs[:n])
		if progress != nil {
			progress.Store(int64(got))
		}
	}
	return nil
}

// recvCheckT is recvCheck for the test goroutine.
func recvCheckT(t testing.TB, s *Socket, src, dst *netns.Host, seq0 uint32, sizes []int) {
	t.Helper()
	if err := recvCheck(s, src, dst, seq0, sizes, nil); err != nil {
		t.Fatal(err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// sizesUpTo returns n frame sizes spread over [minFrame, max].
func sizesUpTo(n, max int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = minFrame + (i*7919)%(max-minFrame+1)
	}
	s[0], s[n-1] = minFrame, max
	return s
}

func TestVethBothWays(t *testing.T) {
	tests := []struct {
		name string
		mtu  int
		cfg  Config
	}{
		{"mtu1500", 1500, Config{RingSize: 512}},
		{"mtu9000", 9000, Config{RingSize: 512}},
		{"mtu1500/headroom", 1500, Config{RingSize: 512, Headroom: 256}},
		{"mtu9000/frame2048/headroom", 9000, Config{RingSize: 512, FrameSize: 2048, Headroom: 128}},
		{"mtu3000/frags", 3000, Config{RingSize: 512, Frags: true}},
		{"mtu1500/generic", 1500, Config{RingSize: 512, Attach: AttachGeneric}},
		{"mtu9000/generic", 9000, Config{RingSize: 512, Attach: AttachGeneric}},
		{"mtu1500/busypoll", 1500, Config{RingSize: 512, BusyPoll: 20 * time.Microsecond, BusyPollBudget: 16}},
		{"mtu1500/copy", 1500, Config{RingSize: 512, Mode: ModeCopy}},
		{"mtu1500/spin", 1500, Config{RingSize: 512, Spin: 50 * time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mtu := tt.mtu
			p, da, db := pairT(t, netns.Config{MTU: mtu}, tt.cfg)
			a, b := da.Sockets()[0], db.Sockets()[0]
			info := a.Info()
			if info.Kind != "af_xdp" || info.Mode != ModeCopy || info.MTU != mtu || info.MaxFrame != mtu+ethOverhead ||
				info.Index != p.A.Index || info.Name != p.A.Ifname || !bytes.Equal(info.MAC, p.A.MAC) {
				t.Fatalf("Info() = %+v, want af_xdp copy mode on %s mtu %d", info, p.A.Ifname, mtu)
			}
			wantAttach := tt.cfg.Attach
			if wantAttach == AttachAuto {
				wantAttach = AttachDriver // veth has native XDP
			}
			if m := da.AttachMode(); m != wantAttach {
				t.Errorf("AttachMode() = %q, want %q", m, wantAttach)
			}
			// Frames up to the MTU (an IP packet of MTU bytes plus the
			// Ethernet header); sent in both directions.
			sizes := sizesUpTo(2000, mtu+ethLen)
			exchange(t, a, b, p.A, p.B, 0, sizes)
			exchange(t, b, a, p.B, p.A, 5000, sizes)

			sa, sb := a.Stats(), b.Stats()
			if sa.TxFrames != uint64(len(sizes)) || sb.RxFrames != uint64(len(sizes)) {
				t.Errorf("A tx %d, B rx %d, want %d", sa.TxFrames, sb.RxFrames, len(sizes))
			}
			if sa.RxDropped != 0 || sb.RxDropped != 0 || sa.TxDropped != 0 || sb.TxDropped != 0 {
				t.Errorf("drops: A %+v B %+v", sa, sb)
			}
			for _, st := range []link.Stats{sa, sb} {
				for _, k := range []string{"bad_release", "bad_transmit", "bad_desc"} {
					if st.Extra[k] != 0 {
						t.Errorf("Extra[%s] = %d, want 0", k, st.Extra[k])
					}
				}
			}
			room := 4096 - 256 - tt.cfg.Headroom
			if tt.cfg.FrameSize != 0 {
				room = tt.cfg.FrameSize - 256 - tt.cfg.Headroom
			}
			if lin := sb.Extra["rx_linearized"]; (mtu+ethLen > room) != (lin > 0) {
				t.Errorf("mtu %d, receive room %d: rx_linearized = %d", mtu, room, lin)
			}
			if sa.Wakeups == 0 {
				t.Errorf("copy-mode TX issued no wakeups")
			}
		})
	}
}

// TestNonRoCEReachesKernel sends a UDP datagram to another port from the
// AF_XDP socket: the program must pass it to B's kernel, whose UDP socket
// receives it, while RoCE frames still go to B's AF_XDP socket.
func TestNonRoCEReachesKernel(t *testing.T) {
	p, da, db := pairT(t, netns.Config{}, Config{RingSize: 256})
	a, b := da.Sockets()[0], db.Sockets()[0]
	const port = 4792
	var conn *net.UDPConn
	if err := p.B.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.B.IP.AsSlice(), Port: port})
		return err
	}); err != nil {
		t.Fatalf("listen in B: %v", err)
	}
	defer conn.Close()
	const size = 200
	sendAll(t, a, p.A, p.B, port, 7, []int{size}, nil, 0)
	want := buildFrame(make([]byte, size), p.A, p.B, port, 7, size)
	conn.SetReadDeadline(time.Now().Add(eventually))
	got := make([]byte, 2048)
	n, from, err := conn.ReadFromUDP(got)
	if err != nil {
		t.Fatalf("B's kernel did not get the UDP/%d datagram: %v", port, err)
	}
	if !bytes.Equal(got[:n], want[ethLen+ipLen+udpLen:]) || from.Port != 0xc000|7 {
		t.Fatalf("kernel got %d bytes from %v, want the datagram's %d-byte payload", n, from, size-ethLen-ipLen-udpLen)
	}
	// Nothing reached the AF_XDP socket; a RoCE frame still does.
	bufs := make([][]byte, 4)
	if n, _ := b.Receive(bufs, 50*time.Millisecond); n != 0 {
		t.Fatalf("AF_XDP socket received %d frames of non-RoCE traffic", n)
	}
	sendAll(t, a, p.A, p.B, roceUDPPort, 8, []int{size}, nil, 0)
	recvCheckT(t, b, p.A, p.B, 8, []int{size})
}

// A veth made without a queue count allocates a queue per possible CPU
// and uses one (ethtool -l: RX 1): RxQueues counts the queues in use, and
// sockets open on all of them.
func TestRxQueuesInUse(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	err := p.A.Do(func() error {
		la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xq0"}, PeerName: "xq1"}
		if err := netlink.LinkAdd(la); err != nil {
			return err
		}
		for _, name := range []string{"xq0", "xq1"} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		l, err := netlink.LinkByName("xq0")
		if err != nil {
			return err
		}
		nq, err := RxQueues("xq0")
		if err != nil {
			return err
		}
		t.Logf("xq0: %d receive queues allocated, RxQueues %d", l.Attrs().NumRxQueues, nq)
		if nq != 1 {
			return fmt.Errorf("RxQueues(xq0) = %d, want 1", nq)
		}
		queues := make([]int, nq)
		for i := range queues {
			queues[i] = i
		}
		d, err := Open("xq0", Config{Queues: queues, RingSize: 64})
		if err != nil {
			return err
		}
		return d.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMultiQueue(t *testing.T) {
	const queues = 2
	p := netns.NewT(t, netns.Config{Queues: queues})
	var nq int
	if err := p.A.Do(func() error {
		var err error
		nq, err = RxQueues(p.A.Ifname)
		return err
	}); err != nil || nq != queues {
		t.Fatalf("RxQueues(%s) = %d, %v, want %d", p.A.Ifname, nq, err, queues)
	}
	da := openT(t, p.A, Config{Queues: []int{0, 1}, RingSize: 256})
	db := openT(t, p.B, Config{Queues: []int{0, 1}, RingSize: 256})
	if len(da.Sockets()) != queues {
		t.Fatalf("%d sockets, want %d", len(da.Sockets()), queues)
	}
	for q := range queues {
		a, b := da.Sockets()[q], db.Sockets()[q]
		if a.Info().Queue != q {
			t.Fatalf("socket %d serves queue %d", q, a.Info().Queue)
		}
		// veth delivers a frame sent on TX queue q to the peer's RX
		// queue q, and the XDP program to that queue's socket.
		sizes := sizesUpTo(300, 1514)
		seq0 := uint32(q * 1000)
		exchange(t, a, b, p.A, p.B, seq0, sizes)
		if other := db.Sockets()[1-q].Stats().RxFrames; other != uint64(q*len(sizes)) {
			t.Errorf("queue %d traffic: other socket received %d frames", q, other)
		}
	}
}

func TestOwnership(t *testing.T) {
	p, da, db := pairT(t, netns.Config{}, Config{RingSize: 64, TxFrames: 8, RxFrames: 64})
	a, b := da.Sockets()[0], db.Sockets()[0]
	bufs := make([][]byte, 16)
	if n := a.Alloc(bufs); n != 8 {
		t.Fatalf("Alloc(16) with 8 tx frames = %d, want 8", n)
	}
	if st := a.Stats(); st.TxNoBuffers != 1 {
		t.Errorf("TxNoBuffers = %d, want 1", st.TxNoBuffers)
	}
	if n := a.Alloc(bufs[8:]); n != 0 {
		t.Fatalf("Alloc on empty = %d", n)
	}
	a.Release(bufs[:8])
	a.Release(bufs[:1]) // double release
	if got := a.Stats().Extra["bad_release"]; got != 1 {
		t.Fatalf("bad_release after double release = %d, want 1", got)
	}
	a.Release([][]byte{make([]byte, 64)}) // foreign
	if got := a.Stats().Extra["bad_release"]; got != 2 {
		t.Fatalf("bad_release after foreign release = %d, want 2", got)
	}
	// Transmitting a released buffer is refused, and the pool is intact.
	if n, err := a.Transmit(bufs[:1]); n != 0 || !errors.Is(err, ErrBadBuffer) {
		t.Fatalf("Transmit(released) = %d, %v, want 0, ErrBadBuffer", n, err)
	}
	if n := a.Alloc(bufs); n != 8 {
		t.Fatalf("Alloc after releases = %d, want 8", n)
	}
	// An empty frame is refused and its buffer taken back.
	a.Release(bufs[1:8])
	if n, err := a.Transmit([][]byte{bufs[0][:0]}); n != 0 || !errors.Is(err, ErrEmptyFrame) {
		t.Fatalf("Transmit(empty frame) = %d, %v, want 0, ErrEmptyFrame", n, err)
	}
	if n := a.Alloc(bufs); n != 8 {
		t.Fatalf("Alloc after refused Transmit = %d, want 8", n)
	}
	a.Release(bufs[:8])
	// Received buffers: a frame sent back from B's receive buffer (in-place
	// forwarding), then a release of that buffer, which is no longer ours.
	sendAll(t, a, p.A, p.B, roceUDPPort, 1, []int{300}, nil, 0)
	rx := make([][]byte, 4)
	n, err := b.Receive(rx, 5*time.Second)
	if err != nil || n != 1 {
		t.Fatalf("Receive = %d, %v, want 1 frame", n, err)
	}
	f := buildFrame(rx[0], p.B, p.A, roceUDPPort, 2, 300)
	if sent, err := b.Transmit([][]byte{f}); sent != 1 || err != nil {
		t.Fatalf("Transmit(received buffer) = %d, %v", sent, err)
	}
	b.Release([][]byte{f}) // it belongs to the kernel now
	if got := b.Stats().Extra["bad_release"]; got != 1 {
		t.Fatalf("releasing a transmitted buffer: bad_release = %d, want 1", got)
	}
	recvCheckT(t, a, p.B, p.A, 2, []int{300})

	// A received buffer stretched to its chunk's end is longer than
	// MaxFrame: refused, and taken back all the same.
	sendAll(t, a, p.A, p.B, roceUDPPort, 3, []int{300}, nil, 0)
	if n, err := b.Receive(rx, 5*time.Second); err != nil || n != 1 {
		t.Fatalf("Receive = %d, %v, want 1 frame", n, err)
	}
	long := rx[0][:cap(rx[0])]
	if len(long) <= b.Info().MaxFrame {
		t.Fatalf("received buffer's capacity %d is not beyond MaxFrame %d", len(long), b.Info().MaxFrame)
	}
	if sent, err := b.Transmit([][]byte{long}); sent != 0 || !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Transmit(%d bytes) = %d, %v, want 0, ErrFrameTooLarge", len(long), sent, err)
	}
	b.Release(rx[:1])
	if got := b.Stats().Extra["bad_release"]; got != 2 {
		t.Fatalf("releasing a refused buffer: bad_release = %d, want 2 (Transmit took it back)", got)
	}
	if err := b.checkOwners(); err != nil {
		t.Fatal(err)
	}
}

// TestReceiveWakeup checks the timeout, Wakeup and Close paths of Receive,
// sleeping at once and after a spin.
func TestReceiveWakeup(t *testing.T) {
	for _, spin := range []time.Duration{0, 200 * time.Microsecond} {
		t.Run(fmt.Sprint("spin", spin), func(t *testing.T) { receiveWakeup(t, spin) })
	}
}

func receiveWakeup(t *testing.T, spin time.Duration) {
	_, da, _ := pairT(t, netns.Config{}, Config{RingSize: 64, Spin: spin})
	s := da.Sockets()[0]
	bufs := make([][]byte, 4)
	start := time.Now()
	if n, err := s.Receive(bufs, 30*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("Receive on idle link = %d, %v", n, err)
	}
	if d := time.Since(start); d < 25*time.Millisecond {
		t.Fatalf("Receive(30ms) returned after %v", d)
	}
	// No Receive waiting: the next one returns at once, woken, not
	// timed out; only a lost Wakeup lets it wait out its minute.
	s.Wakeup()
	start = time.Now()
	if n, err := s.Receive(bufs, time.Minute); n != 0 || err != nil || time.Since(start) >= time.Minute {
		t.Fatalf("Receive after Wakeup = %d, %v after %v, want 0, nil before its minute", n, err, time.Since(start))
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		s.Wakeup()
	}()
	if n, err := s.Receive(bufs, -1); n != 0 || err != nil {
		t.Fatalf("Receive(-1) woken = %d, %v", n, err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.Receive(bufs, -1)
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("Receive during Close = %v, want ErrClosed", err)
		}
	case <-time.After(eventually):
		t.Fatal("Receive did not return after Close")
	}
	if n, err := s.Receive(bufs, 0); n != 0 || !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Receive after Close = %d, %v", n, err)
	}
	if _, err := s.Transmit(nil); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Transmit after Close = %v", err)
	}
	if n := s.Alloc(bufs); n != 0 {
		t.Fatalf("Alloc after Close = %d", n)
	}
	s.Wakeup() // must not touch a closed fd
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCloseAndRebind closes twice and reopens the same queue at once. The
// kernel releases a closed socket's queue asynchronously, so an immediate
// bind may meet EBUSY: without retries Open must say ErrBusy, and with the
// default retry it must succeed every time.
func TestCloseAndRebind(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	peer := openT(t, p.B, Config{RingSize: 64})
	umems := umemHook(t)
	fds0, maps0 := resources(t)
	busy := 0
	for i := range 20 {
		err := p.A.Do(func() error {
			d, err := Open(p.A.Ifname, Config{RingSize: 64, BusyRetry: -1})
			if err != nil {
				return err
			}
			return d.Close()
		})
		if errors.Is(err, ErrBusy) {
			busy++
		} else if err != nil {
			t.Fatalf("open without retry #%d: %v", i, err)
		}
	}
	t.Logf("without retry, %d of 20 immediate rebinds met EBUSY", busy)
	for i := range 20 {
		var d *Device
		if err := p.A.Do(func() error {
			var err error
			d, err = Open(p.A.Ifname, Config{RingSize: 64})
			return err
		}); err != nil {
			t.Fatalf("open #%d: %v", i, err)
		}
		sendAll(t, d.Sockets()[0], p.A, p.B, roceUDPPort, uint32(i), []int{100}, nil, 0)
		recvCheckT(t, peer.Sockets()[0], p.A, p.B, uint32(i), []int{100})
		if err := d.Close(); err != nil {
			t.Fatalf("close #%d: %v", i, err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("second close #%d: %v", i, err)
		}
	}
	// Everything the 40 devices held is gone.
	if fds1, maps1 := resources(t); fds1 != fds0 || len(maps1) != len(maps0) {
		t.Errorf("after 40 open/close: fds %d→%d, socket maps %d→%d", fds0, fds1, len(maps0), len(maps1))
	}
	if len(*umems) != 40 {
		t.Errorf("%d UMEMs made by 40 opens", len(*umems))
	}
	for _, r := range *umems {
		umemGone(t, r.u, r.base, r.size)
	}
}

// resources counts our file descriptors and the mappings AF_XDP leaves: ring
// mappings (of the socket) and UMEMs (found by testHookUMEM).
func resources(t *testing.T) (fds int, maps []string) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "socket:") || strings.Contains(l, "xdp") {
			maps = append(maps, l)
		}
	}
	return len(ents), maps
}

// umemGone checks that a UMEM was unmapped: its memory is released in our
// bookkeeping and no mapping of exactly its range is left. (A later mapping
// may reuse the addresses, and an anonymous mapping may merge with its
// neighbours, so the address alone proves nothing.)
func umemGone(t *testing.T, u *umem, base uintptr, size int) {
	t.Helper()
	if u.mem != nil || u.refs.Load() != 0 {
		t.Errorf("UMEM at %#x: %d references left, memory still held", base, u.refs.Load())
	}
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		var lo, hi uintptr
		if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err == nil && lo == base && hi == base+uintptr(size) {
			t.Errorf("UMEM mapping still present: %s", l)
		}
	}
}

// umemHook records every UMEM Open makes until the test ends.
type umemRec struct {
	u    *umem
	base uintptr
	size int
}

func umemHook(t *testing.T) *[]umemRec {
	var recs []umemRec
	testHookUMEM = func(u *umem) { recs = append(recs, umemRec{u, u.base, len(u.mem)}) }
	t.Cleanup(func() { testHookUMEM = nil })
	return &recs
}

// TestOpenFailureLeaksNothing fails Open halfway (a queue the veth does not
// have, after the program, the UMEM and the first socket exist) and checks
// that every fd and mapping is gone.
func TestOpenFailureLeaksNothing(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	umems := umemHook(t)
	fds0, maps0 := resources(t)
	err := p.A.Do(func() error {
		_, err := Open(p.A.Ifname, Config{Queues: []int{0, 7}, RingSize: 64})
		return err
	})
	if err == nil {
		t.Fatal("Open with a queue the device does not have succeeded")
	}
	if errors.Is(err, ErrNotSupported) || errors.Is(err, ErrPermission) {
		t.Skipf("cannot open AF_XDP here: %v", err)
	}
	t.Logf("Open failed as expected: %v", err)
	fds1, maps1 := resources(t)
	if fds1 != fds0 {
		t.Errorf("fds: %d before, %d after a failed Open", fds0, fds1)
	}
	if len(maps1) != len(maps0) {
		t.Errorf("socket mappings: %d before, %d after a failed Open:\n%s", len(maps0), len(maps1), strings.Join(maps1, "\n"))
	}
	if len(*umems) != 1 {
		t.Fatalf("Open made %d UMEMs, want 1", len(*umems))
	}
	r := (*umems)[0]
	umemGone(t, r.u, r.base, r.size)
	// The interface is clean: a new Open works and gets frames.
	peer := openT(t, p.B, Config{RingSize: 64})
	d := openT(t, p.A, Config{RingSize: 64})
	sendAll(t, d.Sockets()[0], p.A, p.B, roceUDPPort, 0, []int{500}, nil, 0)
	recvCheckT(t, peer.Sockets()[0], p.A, p.B, 0, []int{500})
	fds2, maps2 := resources(t)
	if len(maps2) <= len(maps0) || fds2 <= fds0 {
		t.Errorf("open devices show no resources (fds %d, maps %d): the leak check sees nothing", fds2, len(maps2))
	}
}

// TestHotPathAllocs checks that Alloc, Transmit, Receive and Release allocate
// nothing.
func TestHotPathAllocs(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		t.Run(fmt.Sprint("mtu", mtu), func(t *testing.T) {
			p, da, db := pairT(t, netns.Config{MTU: mtu}, Config{RingSize: 256})
			a, b := da.Sockets()[0], db.Sockets()[0]
			tx := make([][]byte, 16)
			rx := make([][]byte, 64)
			size := mtu + ethLen
			var seq uint32
			allocs := testing.AllocsPerRun(200, func() {
				n := a.Alloc(tx)
				for i := range n {
					tx[i] = buildFrame(tx[i], p.A, p.B, roceUDPPort, seq, size)
					seq++
				}
				a.Transmit(tx[:n])
				for got := 0; got < n; {
					m, err := b.Receive(rx, time.Second)
					if err != nil || m == 0 {
						break
					}
					got += m
					b.Release(rx[:m])
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per batch, want 0", allocs)
			}
			if st := b.Stats(); st.RxFrames < 200*16/2 {
				t.Errorf("only %d frames received", st.RxFrames)
			}
		})
	}
}

// TestZeroCopyOnVeth asks for zero-copy on veth: either the kernel can do it
// and frames flow, or Open fails with ErrNoZeroCopy and leaves nothing behind.
func TestZeroCopyOnVeth(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	fds0, maps0 := resources(t)
	var d *Device
	err := p.A.Do(func() error {
		var err error
		d, err = Open(p.A.Ifname, Config{Mode: ModeZeroCopy, RingSize: 64})
		return err
	})
	if err == nil {
		defer d.Close()
		if m := d.Sockets()[0].Info().Mode; m != ModeZeroCopy {
			t.Fatalf("Mode = %q after asking for zero-copy", m)
		}
		t.Skip("this kernel does veth zero-copy; the fallback path is not exercised")
	}
	if !errors.Is(err, ErrNoZeroCopy) {
		t.Fatalf("Open(zero-copy) on veth = %v, want ErrNoZeroCopy", err)
	}
	t.Logf("as expected: %v", err)
	if fds1, maps1 := resources(t); fds1 != fds0 || len(maps1) != len(maps0) {
		t.Errorf("failed Open left fds %d→%d, socket maps %d→%d", fds0, fds1, len(maps0), len(maps1))
	}
}

// TestSmallRingsJumbo sends 9000-MTU frames (three descriptors each way)
// through 64-entry rings with four times as many transmit buffers as the
// completion ring has entries, so Transmit meets a full TX and completion
// ring and must push, reap and retry without losing or stalling a frame.
func TestSmallRingsJumbo(t *testing.T) {
	p, da, db := pairT(t, netns.Config{MTU: 9000}, Config{RingSize: 64, TxFrames: 256, RxFrames: 128, LinearBuffers: 16})
	a, b := da.Sockets()[0], db.Sockets()[0]
	sizes := sizesUpTo(3000, 9014)
	// At most 3 descriptors a frame: a window of 16 frames fits the
	// 64-entry fill and RX rings and the 16 linear buffers.
	exchangeW(t, a, b, p.A, p.B, 0, sizes, 16)
	if st := a.Stats(); st.TxDropped != 0 || st.TxFrames != uint64(len(sizes)) {
		t.Errorf("sender stats %+v", st)
	}
	if st := b.Stats(); st.RxDropped != 0 || st.Extra["rx_linearized"] == 0 {
		t.Errorf("receiver stats %+v", st)
	}
}

// TestTransmitBeyondRings transmits batches of jumbo frames that need more
// descriptors than the TX and completion rings hold (100 frames × 3
// descriptors against 64-entry rings): Transmit must push, reap and retry
// until every frame is queued, and every buffer must come back. The peer
// has no AF_XDP socket; its interface counters say what arrived.
func TestTransmitBeyondRings(t *testing.T) {
	p := netns.NewT(t, netns.Config{MTU: 9000})
	d := openT(t, p.A, Config{RingSize: 64, TxFrames: 128, RxFrames: 64})
	a := d.Sockets()[0]
	before := rxPackets(t, p.B)
	const batches, batch, size = 5, 100, 9014
	bufs := make([][]byte, batch)
	var seq uint32
	for range batches {
		n := 0
		for deadline := time.Now().Add(eventually); n < batch; {
			if time.Now().After(deadline) {
				t.Fatalf("Alloc got %d of %d buffers; stats %+v", n, batch, a.Stats())
			}
			n += a.Alloc(bufs[n:])
		}
		for i := range bufs {
			bufs[i] = buildFrame(bufs[i], p.A, p.B, roceUDPPort, seq, size)
			seq++
		}
		if sent, err := a.Transmit(bufs); sent != batch || err != nil {
			t.Fatalf("Transmit(%d jumbo frames) = %d, %v; stats %+v", batch, sent, err, a.Stats())
		}
	}
	// Every buffer comes back once the kernel completes.
	all := make([][]byte, 128)
	got := 0
	for deadline := time.Now().Add(eventually); got < len(all) && time.Now().Before(deadline); {
		got += a.Alloc(all[got:])
	}
	if got != len(all) {
		t.Fatalf("only %d of %d transmit buffers came back; stats %+v", got, len(all), a.Stats())
	}
	a.Release(all)
	st := a.Stats()
	if st.TxFrames != batches*batch || st.TxDropped != 0 || st.Extra["tx_invalid_descs"] != 0 || st.Extra["bad_desc"] != 0 {
		t.Errorf("stats %+v", st)
	}
	if arrived := rxPackets(t, p.B) - before; arrived != batches*batch {
		t.Errorf("peer interface received %d frames, want %d", arrived, batches*batch)
	}
}

// rxPackets reads h's interface receive counter.
func rxPackets(t *testing.T, h *netns.Host) uint64 {
	t.Helper()
	var n uint64
	if err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Ifname)
		if err != nil {
			return err
		}
		n = l.Attrs().Statistics.RxPackets
		return nil
	}); err != nil {
		t.Fatalf("read %s counters: %v", h.Ifname, err)
	}
	return n
}

// TestInterfaceRemoved deletes the veth under open sockets: Receive and
// Transmit must fail rather than hang or crash, and Close must still release
// everything.
func TestInterfaceRemoved(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	d := openT(t, p.A, Config{RingSize: 64})
	s := d.Sockets()[0]
	fds0, _ := resources(t)
	if err := p.A.RemoveInterface(); err != nil {
		t.Fatal(err)
	}
	// A Receive waiting without a deadline notices within deadCheck.
	bufs := make([][]byte, 8)
	start := time.Now()
	n, err := s.Receive(bufs, -1)
	t.Logf("Receive after removal: %d, %v after %v", n, err, time.Since(start))
	if n != 0 || !errors.Is(err, unix.ENETDOWN) {
		t.Fatalf("Receive after removal = %d, %v, want ENETDOWN", n, err)
	}
	if n, err := s.Receive(bufs, 0); n != 0 || !errors.Is(err, unix.ENETDOWN) {
		t.Errorf("second Receive after removal = %d, %v, want ENETDOWN", n, err)
	}
	if m := s.Alloc(bufs); m > 0 {
		sent, err := s.Transmit(bufs[:m])
		t.Logf("Transmit after removal: %d, %v", sent, err)
		if err == nil {
			t.Errorf("Transmit after removal: no error")
		}
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close after removal: %v", err)
	}
	if fds1, _ := resources(t); fds1 >= fds0 {
		t.Errorf("fds %d before Close, %d after: Close released nothing", fds0, fds1)
	}
}

// A caller that never lets Receive wait (it sleeps on the descriptor
// itself) still learns that the interface went away, within deadCheck.
func TestInterfaceRemovedNonWaiting(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	d := openT(t, p.A, Config{RingSize: 64})
	s := d.Sockets()[0]
	bufs := make([][]byte, 8)
	if n, err := s.Receive(bufs, 0); n != 0 || err != nil {
		t.Fatalf("Receive before removal = %d, %v", n, err)
	}
	if err := p.A.RemoveInterface(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		n, err := s.Receive(bufs, 0)
		if n != 0 {
			t.Fatalf("Receive after removal returned %d frames", n)
		}
		if err != nil {
			if !errors.Is(err, unix.ENETDOWN) {
				t.Fatalf("Receive after removal: %v, want ENETDOWN", err)
			}
			t.Logf("noticed after %v: %v", time.Since(start), err)
			break
		}
		// It checks every deadCheck; a loaded machine may be late, so
		// only a Receive that never notices fails.
		if time.Since(start) > 30*deadCheck {
			t.Fatalf("Receive(bufs, 0) has not noticed the removal in %v", 30*deadCheck)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConcurrentUse runs an owner goroutine sending and receiving while
// others call Stats, Info and Wakeup, then closes the device from yet
// another goroutine: the owner must stop with ErrClosed. Run with -race.
func TestConcurrentUse(t *testing.T) {
	p, da, db := pairT(t, netns.Config{}, Config{RingSize: 256})
	a, b := da.Sockets()[0], db.Sockets()[0]
	stop := make(chan struct{})
	ownerErr := make(chan error, 1)
	go func() {
		tx, rx := make([][]byte, 16), make([][]byte, 16)
		var seq uint32
		for {
			n := a.Alloc(tx)
			for i := range n {
				tx[i] = buildFrame(tx[i], p.A, p.B, roceUDPPort, seq, 200)
				seq++
			}
			if _, err := a.Transmit(tx[:n]); err != nil {
				ownerErr <- err
				return
			}
			m, err := a.Receive(rx, time.Millisecond)
			if err != nil {
				ownerErr <- err
				return
			}
			a.Release(rx[:m])
		}
	}()
	go func() { // b drains
		rx := make([][]byte, 64)
		for {
			n, err := b.Receive(rx, 10*time.Millisecond)
			if err != nil {
				return
			}
			b.Release(rx[:n])
		}
	}()
	done := make(chan struct{})
	for range 3 {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = a.Stats()
				_ = a.Info()
				a.Wakeup()
				b.Wakeup()
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	go da.Close()
	select {
	case err := <-ownerErr:
		if !errors.Is(err, link.ErrClosed) {
			t.Errorf("owner stopped with %v, want ErrClosed", err)
		}
	case <-time.After(eventually):
		t.Fatalf("owner still running %v after Close", eventually)
	}
	close(stop)
	for range 3 {
		<-done
	}
	if st := b.Stats(); st.RxFrames == 0 {
		t.Errorf("no frames went through before Close")
	}
	a.Wakeup() // after Close: harmless
	_ = a.Stats()
}

// TestCloseOneSocket closes one socket of a two-queue device: the other
// keeps working on the shared UMEM, and closing the device afterwards
// releases the rest.
func TestCloseOneSocket(t *testing.T) {
	p, da, db := pairT(t, netns.Config{Queues: 2}, Config{Queues: []int{0, 1}, RingSize: 128})
	if err := da.Sockets()[0].Close(); err != nil {
		t.Fatalf("close socket 0: %v", err)
	}
	if err := db.Sockets()[0].Close(); err != nil {
		t.Fatalf("close peer socket 0: %v", err)
	}
	exchange(t, da.Sockets()[1], db.Sockets()[1], p.A, p.B, 0, sizesUpTo(200, 1514))
	exchange(t, db.Sockets()[1], da.Sockets()[1], p.B, p.A, 0, sizesUpTo(200, 1514))
	u := da.Sockets()[1].um
	if err := da.Close(); err != nil {
		t.Fatalf("close device: %v", err)
	}
	if u.refs.Load() != 0 || u.mem != nil {
		t.Errorf("UMEM after device Close: %d references, memory held %v", u.refs.Load(), u.mem != nil)
	}
}

func TestAvailable(t *testing.T) {
	err := Available()
	if os.Geteuid() == 0 && err != nil && !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Available() as root = %v", err)
	}
	if err != nil && !errors.Is(err, ErrNotSupported) && !errors.Is(err, ErrPermission) {
		t.Fatalf("Available() = %v, want nil or a sentinel", err)
	}
	t.Logf("Available() = %v", err)
}

// TestProgramLoss injects loss through the program Open loaded: with
// SetLoss(1) on the receiver no frame gets through and the program counts
// each drop; with SetLoss(0) every frame arrives again. A Device over the
// caller's Steering has no program of its own.
func TestProgramLoss(t *testing.T) {
	p, da, db := pairT(t, netns.Config{}, Config{RingSize: 256})
	prog := db.Program()
	if prog == nil {
		t.Fatal("Program() = nil for a device that loaded its own")
	}
	if prog.Ifindex() != p.B.Index {
		t.Fatalf("Program().Ifindex() = %d, want %d", prog.Ifindex(), p.B.Index)
	}
	a, b := da.Sockets()[0], db.Sockets()[0]
	if err := prog.SetLoss(1); err != nil {
		t.Fatalf("SetLoss(1): %v", err)
	}
	sizes := sizesUpTo(200, 1000)
	sendAll(t, a, p.A, p.B, roceUDPPort, 0, sizes, nil, 0)
	deadline := time.Now().Add(eventually)
	for {
		c, err := prog.Counters()
		if err != nil {
			t.Fatalf("Counters: %v", err)
		}
		if c.InjectedDrops == uint64(len(sizes)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Counters() = %+v, want %d injected drops", c, len(sizes))
		}
		time.Sleep(10 * time.Millisecond)
	}
	bufs := make([][]byte, 8)
	if n, _ := b.Receive(bufs, 50*time.Millisecond); n != 0 {
		t.Fatalf("received %d frames through 100%% loss", n)
	}
	if err := prog.SetLoss(0); err != nil {
		t.Fatalf("SetLoss(0): %v", err)
	}
	exchange(t, a, b, p.A, p.B, 1000, sizes)

	ps := netns.NewT(t, netns.Config{})
	var own *bpf.Program
	err := ps.A.Do(func() error {
		var err error
		own, err = bpf.Load(bpf.Options{})
		if err != nil {
			return err
		}
		_, err = own.Attach(ps.A.Index)
		return err
	})
	if err != nil {
		t.Skipf("load and attach a program: %v", err)
	}
	t.Cleanup(func() { own.Close() })
	dc := openT(t, ps.A, Config{RingSize: 256, Steering: own})
	if dc.Program() != nil {
		t.Errorf("Program() = %v with the caller's Steering, want nil", dc.Program())
	}
	if err := dc.Close(); err != nil {
		t.Fatal(err)
	}
	if db.Close() != nil || db.Program() != nil {
		t.Errorf("Program() after Close is not nil")
	}
}
