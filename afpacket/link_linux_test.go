package afpacket

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/link"
	"golang.org/x/sys/unix"
)

// openT opens a link on h's veth end inside its namespace, or skips.
func openT(t testing.TB, h *netns.Host, cfg Config) *Link {
	t.Helper()
	var l *Link
	err := h.Do(func() error {
		var err error
		l, err = Open(h.Ifname, cfg)
		return err
	})
	if errors.Is(err, ErrPermission) || errors.Is(err, ErrUnsupported) {
		t.Skipf("cannot open AF_PACKET link: %v", err)
	}
	if err != nil {
		t.Fatalf("Open(%s): %v", h.Ifname, err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// testNet is a veth pair with a link open on each end.
type testNet struct {
	pair   *netns.Pair
	a, b   *Link
	ab, ba addrs // frame addresses from A to B and from B to A
}

func newTestNet(t testing.TB, ncfg netns.Config, cfg Config) *testNet {
	t.Helper()
	pair := netns.NewT(t, ncfg)
	n := &testNet{pair: pair, a: openT(t, pair.A, cfg), b: openT(t, pair.B, cfg)}
	n.ab = addrs{srcMAC: pair.A.MAC, dstMAC: pair.B.MAC, src: pair.A.IP, dst: pair.B.IP}
	n.ba = addrs{srcMAC: pair.B.MAC, dstMAC: pair.A.MAC, src: pair.B.IP, dst: pair.A.IP}
	return n
}

// send builds each spec in a buffer from tx and transmits them all; it
// returns copies of the frames sent.
func send(t testing.TB, tx *Link, a addrs, specs []frameSpec) [][]byte {
	t.Helper()
	var want [][]byte
	for len(specs) > 0 {
		bufs := make([][]byte, min(len(specs), 32))
		n := tx.Alloc(bufs)
		if n == 0 {
			t.Fatalf("Alloc: no buffers")
		}
		bufs = bufs[:n]
		for i := range bufs {
			if specs[i].size < 0 { // an ARP request
				bufs[i] = a.arpRequest(bufs[i])
			} else {
				bufs[i] = a.build(bufs[i], specs[i])
			}
			want = append(want, append([]byte(nil), bufs[i]...))
		}
		sent, err := tx.Transmit(bufs)
		if err != nil || sent != n {
			t.Fatalf("Transmit(%d frames) = %d, %v", n, sent, err)
		}
		specs = specs[n:]
	}
	return want
}

// eventually bounds the waits for what must happen: long enough that only
// a hang, never a slow machine, reaches it.
const eventually = 30 * time.Second

// receiveN collects n frames, waiting up to eventually for each; it
// returns copies (fewer if they stopped coming, more if a batch brought
// them) and releases the buffers.
func receiveN(t testing.TB, rx *Link, n int) [][]byte {
	t.Helper()
	return receive(t, rx, n, eventually)
}

// receiveQuiet collects frames until quiet passes without one. It is for
// frames that must not come: on a slow machine it may miss a late one,
// but it never fails one for want of time.
func receiveQuiet(t testing.TB, rx *Link, quiet time.Duration) [][]byte {
	t.Helper()
	return receive(t, rx, -1, quiet)
}

// receive collects frames until it has want of them or quiet passes
// without one; it returns copies and releases the buffers.
func receive(t testing.TB, rx *Link, want int, quiet time.Duration) [][]byte {
	t.Helper()
	var got [][]byte
	bufs := make([][]byte, 64)
	for len(got) < want || want < 0 {
		n, err := rx.Receive(bufs, quiet)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if n == 0 {
			break
		}
		for _, b := range bufs[:n] {
			got = append(got, append([]byte(nil), b...))
		}
		rx.Release(bufs[:n])
	}
	return got
}

// exchangeSpecs are RoCE frames of every shape and of sizes up to the
// largest the link takes.
func exchangeSpecs(l *Link) []frameSpec {
	mtu := l.Info().MTU
	var specs []frameSpec
	seed := byte(0)
	for _, shape := range []frameSpec{{}, {ipv6: true}, {vlan: true}, {vlan: true, ipv6: true}} {
		hdr := 14 + 20 + 8
		if shape.ipv6 {
			hdr = 14 + 40 + 8
		}
		if shape.vlan {
			hdr += 4
		}
		top := mtu + 14
		if shape.vlan {
			top += 4
		}
		for _, size := range []int{hdr, hdr + 1, hdr + 12 + 4, 60, 64, 512, 1024 + hdr + 16, top - 1, top} {
			if size < hdr || size > top {
				continue
			}
			s := shape
			s.size, s.seed = size, seed
			seed++
			specs = append(specs, s)
		}
	}
	return specs
}

// TestExchange sends RoCE frames of every shape both ways and checks that
// each arrives whole, in order, byte for byte (802.1Q tags included).
func TestExchange(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		t.Run(fmt.Sprint("mtu", mtu), func(t *testing.T) {
			n := newTestNet(t, netns.Config{MTU: mtu}, Config{})
			for _, dir := range []struct {
				name   string
				tx, rx *Link
				a      addrs
			}{
				{"a to b", n.a, n.b, n.ab},
				{"b to a", n.b, n.a, n.ba},
			} {
				specs := exchangeSpecs(dir.tx)
				want := send(t, dir.tx, dir.a, specs)
				got := receiveN(t, dir.rx, len(want))
				if len(got) != len(want) {
					t.Fatalf("%s: received %d frames, want %d", dir.name, len(got), len(want))
				}
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						t.Errorf("%s: frame %d (%+v):\n got %x\nwant %x", dir.name, i, specs[i], got[i], want[i])
					}
				}
				vlans := 0
				for _, s := range specs {
					if s.vlan {
						vlans++
					}
				}
				// veth's receive path strips the tag (skb_vlan_untag), so
				// every tagged frame went through the put-back path.
				if got := dir.rx.Stats().Extra["rx_vlan_restored"]; got != uint64(vlans) {
					t.Errorf("%s: rx_vlan_restored = %d, want %d", dir.name, got, vlans)
				}
				if extra := receiveQuiet(t, dir.tx, 50*time.Millisecond); len(extra) != 0 {
					t.Errorf("%s: the sender received %d frames (its own?)", dir.name, len(extra))
				}
			}
			st := n.a.Stats()
			if st.RxFrames == 0 || st.TxFrames == 0 || st.RxBytes == 0 || st.TxBytes == 0 {
				t.Errorf("Stats = %+v, want traffic counted", st)
			}
			if st.RxFrames != st.Extra["kernel_packets"] || st.RxDropped != 0 {
				t.Errorf("Stats: %d received, kernel accepted %d, %d dropped", st.RxFrames, st.Extra["kernel_packets"], st.RxDropped)
			}
		})
	}
}

// TestFilter sends frames that are not RoCE v2, or not by the XDP program's
// rules, and checks that only the RoCE frames between them are delivered.
func TestFilter(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{})
	good := []frameSpec{{size: 100, seed: 1}, {ipv6: true, size: 120, seed: 2}, {vlan: true, size: 140, seed: 3}}
	bad := []frameSpec{
		{dport: 4792, size: 100},
		{dport: 0xb712, size: 100}, // the port byte-swapped
		{ipv6: true, dport: 53, size: 120},
		{proto: protoTCP, size: 100},
		{ipv6: true, proto: protoTCP, size: 120},
		{options: 4, size: 100},
		{options: 40, size: 120},
		{fragWord: 0x2000, size: 100}, // MF
		{fragWord: 0x0001, size: 100}, // offset 1
		{fragWord: 0x1fff, size: 100},
		{vlan: true, dport: 4790, size: 100},
		{size: -1}, // ARP request
	}
	var specs []frameSpec
	var want []frameSpec
	for i, b := range bad {
		specs = append(specs, b)
		if i%4 == 3 {
			specs = append(specs, good[i%3])
			want = append(want, good[i%3])
		}
	}
	wantFrames := make([][]byte, 0, len(want))
	for _, s := range want {
		wantFrames = append(wantFrames, n.ba.build(make([]byte, s.size), s))
	}
	send(t, n.b, n.ba, specs)

	// Truncated RoCE frames, cut at every length up to the end of UDP.
	full := []frameSpec{{size: 100}, {ipv6: true, size: 100}, {vlan: true, size: 100}, {vlan: true, ipv6: true, size: 100}}
	ends := []int{14 + 20 + 8, 14 + 40 + 8, 18 + 20 + 8, 18 + 40 + 8}
	bufs := make([][]byte, 1)
	for i, s := range full {
		for size := 14; size < ends[i]; size++ {
			if n.b.Alloc(bufs) != 1 {
				t.Fatal("Alloc: no buffers")
			}
			f := n.ba.build(bufs[0], s)[:size]
			if sent, err := n.b.Transmit([][]byte{f}); sent != 1 || err != nil {
				t.Fatalf("Transmit(%d bytes) = %d, %v", size, sent, err)
			}
		}
	}
	// Two VLAN tags in the data, or an 802.1ad tag then 802.1Q: one too
	// many. Built by hand from a tagged frame.
	for _, outer := range []uint16{ethVLAN, ethQinQ} {
		if n.b.Alloc(bufs) != 1 {
			t.Fatal("Alloc: no buffers")
		}
		n.ba.build(bufs[0][4:], frameSpec{vlan: true, size: 100})
		f := bufs[0][:104]
		copy(f[0:12], f[4:16])
		f[12], f[13], f[14], f[15] = byte(outer>>8), byte(outer), 0, 7
		if sent, err := n.b.Transmit([][]byte{f}); sent != 1 || err != nil {
			t.Fatalf("Transmit(double tag) = %d, %v", sent, err)
		}
	}
	// Real kernel traffic: a UDP datagram to another port from B's stack,
	// and one to 4791, which is RoCE-shaped and must come through.
	var conn *net.UDPConn
	if err := n.pair.B.Do(func() error {
		var err error
		conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(n.pair.A.IP, 9)))
		return err
	}); err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("not roce")); err != nil {
		t.Fatalf("udp write: %v", err)
	}
	var kconn *net.UDPConn
	if err := n.pair.B.Do(func() error {
		var err error
		kconn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(n.pair.A.IP, roceV2Port)))
		return err
	}); err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer kconn.Close()
	if _, err := kconn.Write([]byte("kernel datagram to 4791")); err != nil {
		t.Fatalf("udp write: %v", err)
	}

	got := receiveN(t, n.a, len(wantFrames)+1)
	got = append(got, receiveQuiet(t, n.a, 50*time.Millisecond)...)
	if len(got) != len(wantFrames)+1 {
		for i, g := range got {
			t.Logf("got %d: %x", i, g)
		}
		t.Fatalf("received %d frames, want %d RoCE frames and the kernel's datagram to 4791", len(got), len(wantFrames)+1)
	}
	for i, w := range wantFrames {
		if !bytes.Equal(got[i], w) {
			t.Errorf("frame %d:\n got %x\nwant %x", i, got[i], w)
		}
	}
	if last := got[len(got)-1]; !bytes.HasSuffix(last, []byte("kernel datagram to 4791")) {
		t.Errorf("last frame %x, want the kernel's UDP datagram to 4791", last)
	}
	if st := n.a.Stats(); st.Extra["kernel_packets"] != uint64(len(got)) {
		t.Errorf("kernel says its filter accepted %d frames, want %d", st.Extra["kernel_packets"], len(got))
	}
}

func TestWakeup(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{})
	bufs := make([][]byte, 8)

	// Wakeup with no Receive waiting: the next Receive does not wait.
	n.a.Wakeup()
	// Only a lost Wakeup lets it wait out its minute.
	start := time.Now()
	if got, err := n.a.Receive(bufs, time.Minute); got != 0 || err != nil {
		t.Fatalf("Receive after Wakeup = %d, %v", got, err)
	}
	if d := time.Since(start); d >= time.Minute {
		t.Errorf("Receive after Wakeup waited %v, its whole timeout", d)
	}

	// Wakeup from another goroutine ends a Receive waiting forever.
	done := make(chan error, 1)
	go func() {
		_, err := n.a.Receive(bufs, -1)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	n.a.Wakeup()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Receive woken: %v", err)
		}
	case <-time.After(eventually):
		t.Fatal("Wakeup did not end Receive(-1)")
	}

	// A timeout with nothing arriving returns 0, nil, not before it (a
	// loaded machine may return late).
	start = time.Now()
	if got, err := n.a.Receive(bufs, 30*time.Millisecond); got != 0 || err != nil {
		t.Errorf("Receive(timeout) = %d, %v", got, err)
	}
	if d := time.Since(start); d < 25*time.Millisecond {
		t.Errorf("Receive(30ms) returned after %v", d)
	}
	// Polling returns at once.
	if got, err := n.a.Receive(bufs, 0); got != 0 || err != nil {
		t.Errorf("Receive(0) = %d, %v", got, err)
	}

	// A frame ends a wait too.
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		got, err := n.a.Receive(bufs, 5*time.Second)
		if got > 0 {
			n.a.Release(bufs[:got])
		}
		res <- result{got, err}
	}()
	time.Sleep(20 * time.Millisecond)
	send(t, n.b, n.ba, []frameSpec{{size: 80}})
	if r := <-res; r.n != 1 || r.err != nil {
		t.Errorf("Receive while a frame arrives = %d, %v; want 1, nil", r.n, r.err)
	}
}

func TestClose(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{})
	bufs := make([][]byte, 4)

	// Close ends a Receive waiting in another goroutine.
	done := make(chan error, 1)
	go func() {
		_, err := n.a.Receive(bufs, -1)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	for i := 0; i < 2; i++ {
		if err := n.a.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) {
			t.Errorf("waiting Receive after Close: %v, want ErrClosed", err)
		}
	case <-time.After(eventually):
		t.Fatal("Close did not end Receive(-1)")
	}
	if _, err := n.a.Receive(bufs, 0); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Receive after Close: %v", err)
	}
	if _, err := n.a.Transmit(nil); !errors.Is(err, link.ErrClosed) {
		t.Errorf("Transmit after Close: %v", err)
	}
	if got := n.a.Alloc(bufs); got != 0 {
		t.Errorf("Alloc after Close = %d", got)
	}
	n.a.Release(bufs)
	n.a.Wakeup()
	_ = n.a.Stats()
	if n.a.Info().Kind != "af_packet" {
		t.Errorf("Info after Close = %+v", n.a.Info())
	}
}

func TestInfo(t *testing.T) {
	n := newTestNet(t, netns.Config{MTU: 4000}, Config{})
	info := n.a.Info()
	want := link.Info{Kind: "af_packet", Mode: "recvmmsg", Name: n.pair.A.Ifname, Index: n.pair.A.Index,
		MAC: n.pair.A.MAC, MTU: 4000, MaxFrame: 4018}
	if info.Kind != want.Kind || info.Mode != want.Mode || info.Name != want.Name || info.Index != want.Index ||
		!bytes.Equal(info.MAC, want.MAC) || info.MTU != want.MTU || info.MaxFrame != want.MaxFrame {
		t.Errorf("Info() = %+v, want %+v", info, want)
	}
}

func TestOpenErrors(t *testing.T) {
	pair := netns.NewT(t, netns.Config{})
	err := pair.A.Do(func() error {
		_, err := Open("xr-nonexistent", Config{})
		return err
	})
	if !errors.Is(err, ErrNoInterface) {
		t.Errorf("Open(nonexistent) = %v, want ErrNoInterface", err)
	}
	err = pair.A.Do(func() error {
		_, err := Open("lo", Config{}) // no Ethernet address
		return err
	})
	if !errors.Is(err, ErrNoInterface) {
		t.Errorf("Open(lo) = %v, want ErrNoInterface", err)
	}
	for _, cfg := range []Config{{RxFrames: -1}, {Batch: 5000}, {SocketBuffer: -1}, {TxWait: -1}} {
		err := pair.A.Do(func() error {
			l, err := Open(pair.A.Ifname, cfg)
			if err == nil {
				l.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("Open with %+v succeeded", cfg)
		}
	}
	// Without CAP_NET_RAW: drop it on this thread only.
	err = pair.A.Do(func() error {
		if err := dropNetRaw(); err != nil {
			return fmt.Errorf("skip: %w", err)
		}
		_, err := Open(pair.A.Ifname, Config{})
		return err
	})
	if err != nil && strings.HasPrefix(err.Error(), "skip:") {
		t.Logf("could not drop CAP_NET_RAW to test the error: %v", err)
	} else if !errors.Is(err, ErrPermission) {
		t.Errorf("Open without CAP_NET_RAW = %v, want ErrPermission", err)
	}
}

// dropNetRaw removes CAP_NET_RAW from the calling thread's effective set
// (the thread dies with netns.Host.Do's goroutine).
func dropNetRaw() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[unix.CAP_NET_RAW/32].Effective &^= 1 << (unix.CAP_NET_RAW % 32)
	return unix.Capset(&hdr, &data[0])
}

// TestBuffers checks the pool's ownership rules.
func TestBuffers(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{RxFrames: 8, TxFrames: 4})
	bufs := make([][]byte, 6)
	if got := n.b.Alloc(bufs); got != 4 {
		t.Fatalf("Alloc(6) with 4 tx frames = %d", got)
	}
	for _, b := range bufs[:4] {
		if len(b) != n.b.Info().MaxFrame || cap(b) != len(b) {
			t.Errorf("Alloc gave len %d cap %d, want %d", len(b), cap(b), n.b.Info().MaxFrame)
		}
	}
	if st := n.b.Stats(); st.TxNoBuffers != 1 {
		t.Errorf("TxNoBuffers = %d, want 1", st.TxNoBuffers)
	}
	if got := n.b.Alloc(bufs[4:]); got != 0 {
		t.Errorf("Alloc with none free = %d", got)
	}
	// Release one twice: the second is refused.
	n.b.Release(bufs[3:4])
	n.b.Release(bufs[3:4])
	if st := n.b.Stats(); st.Extra["bad_release"] != 1 {
		t.Errorf("bad_release = %d, want 1", st.Extra["bad_release"])
	}
	// Too short, too long, untagged at MTU+18, foreign, and a good one.
	mtu := n.b.Info().MTU
	short := n.ba.build(bufs[0], frameSpec{size: 60})[:13]
	long := n.ba.build(bufs[1], frameSpec{vlan: true, size: mtu + 18})
	long = append(long, 0) // past MaxFrame: append reallocates, so it is foreign too
	untagged := n.ba.build(bufs[1], frameSpec{size: mtu + 14})
	untagged = untagged[:mtu+18]
	foreign := make([]byte, 100)
	ok := n.ba.build(bufs[2], frameSpec{size: 100, seed: 9})
	sent, err := n.b.Transmit([][]byte{short, long, untagged, foreign, ok, ok})
	if sent != 1 || err == nil {
		t.Errorf("Transmit(bad frames and one good) = %d, %v; want 1 and an error", sent, err)
	}
	if !errors.Is(err, ErrFrameSize) {
		t.Errorf("Transmit error %v, want ErrFrameSize first", err)
	}
	if st := n.b.Stats(); st.TxDropped != 5 || st.TxFrames != 1 {
		t.Errorf("TxDropped, TxFrames = %d, %d; want 5, 1", st.TxDropped, st.TxFrames)
	}
	// Everything is back: 4 buffers to allocate again.
	if got := n.b.Alloc(bufs); got != 4 {
		t.Errorf("Alloc after Transmit = %d, want 4", got)
	}
	if _, err := n.b.Transmit([][]byte{foreign}); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Transmit(foreign) = %v, want ErrNotOwned", err)
	}

	// Receive: at most RxFrames buffers are out at a time.
	if got := receiveN(t, n.a, 1); len(got) != 1 {
		t.Fatalf("received %d frames, want 1", len(got))
	}
	n.b.Release(bufs[:4])
	send(t, n.b, n.ba, []frameSpec{{size: 70}, {size: 70}, {size: 70}, {size: 70}})
	send(t, n.b, n.ba, []frameSpec{{size: 70}, {size: 70}, {size: 70}, {size: 70}, {size: 70}, {size: 70}})
	rx := make([][]byte, 16)
	held := 0
	for held < 8 {
		got, err := n.a.Receive(rx[held:], time.Second)
		if err != nil || got == 0 {
			t.Fatalf("Receive = %d, %v with %d held", got, err, held)
		}
		held += got
	}
	if got, err := n.a.Receive(rx[held:], 50*time.Millisecond); got != 0 || err != nil {
		t.Errorf("Receive with all buffers held = %d, %v", got, err)
	}
	n.a.Release(rx[:held])
	if got := receiveN(t, n.a, 2); len(got) != 2 {
		t.Errorf("after Release: received %d of the 2 frames left", len(got))
	}
	// A received buffer can be transmitted back (and is then returned).
	send(t, n.b, n.ba, []frameSpec{{size: 90, seed: 5}})
	if got, err := n.a.Receive(rx[:1], time.Second); got != 1 || err != nil {
		t.Fatalf("Receive = %d, %v", got, err)
	}
	copy(rx[0][0:6], n.pair.B.MAC)
	copy(rx[0][6:12], n.pair.A.MAC)
	if sent, err := n.a.Transmit(rx[:1]); sent != 1 || err != nil {
		t.Fatalf("Transmit(received buffer) = %d, %v", sent, err)
	}
	if got := receiveN(t, n.b, 1); len(got) != 1 {
		t.Errorf("B received %d reflected frames, want 1", len(got))
	}
}

// TestAllocs checks that a steady stream allocates nothing: Alloc,
// Transmit, Receive and Release of a batch.
func TestAllocs(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{})
	const batch = 16
	tx := make([][]byte, batch)
	rx := make([][]byte, batch)
	spec := frameSpec{size: 1024, seed: 3}
	frame := n.ba.build(make([]byte, spec.size), spec)
	round := func() {
		if n.b.Alloc(tx) != batch {
			t.Fatal("Alloc short")
		}
		for i := range tx {
			tx[i] = tx[i][:len(frame)]
			copy(tx[i], frame)
		}
		if sent, err := n.b.Transmit(tx); sent != batch || err != nil {
			t.Fatalf("Transmit = %d, %v", sent, err)
		}
		for got := 0; got < batch; {
			k, err := n.a.Receive(rx, time.Second)
			if err != nil || k == 0 {
				t.Fatalf("Receive = %d, %v after %d", k, err, got)
			}
			n.a.Release(rx[:k])
			got += k
		}
	}
	round() // warm up
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("allocations per batch of %d frames = %v, want 0", batch, allocs)
	}
	// Waiting (with a timeout and with Wakeup) allocates nothing either.
	wait := func() {
		n.a.Wakeup()
		if k, err := n.a.Receive(rx, time.Second); k != 0 || err != nil {
			t.Fatalf("Receive = %d, %v", k, err)
		}
	}
	if allocs := testing.AllocsPerRun(100, wait); allocs != 0 {
		t.Errorf("allocations per Wakeup+Receive = %v, want 0", allocs)
	}
}

// TestListenDiscard checks that the kernel answers RoCE datagrams nobody
// listens to with ICMP port unreachable, and that ListenDiscard stops it
// while the link still gets the frames.
func TestListenDiscard(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{})
	var conn *net.UDPConn
	if err := n.pair.B.Do(func() error {
		var err error
		conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(n.pair.A.IP, roceV2Port)))
		return err
	}); err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	// refused sends a datagram and reports whether an ICMP port
	// unreachable came back (a connected UDP socket reads ECONNREFUSED).
	refused := func() bool {
		if _, err := conn.Write([]byte("roce?")); err != nil {
			return errors.Is(err, unix.ECONNREFUSED)
		}
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := conn.Read(make([]byte, 16))
		return errors.Is(err, unix.ECONNREFUSED)
	}

	var d *Discard
	if err := n.pair.A.Do(func() error {
		var err error
		d, err = ListenDiscard(roceV2Port)
		return err
	}); err != nil {
		t.Fatalf("ListenDiscard: %v", err)
	}
	if refused() {
		t.Errorf("with ListenDiscard: the kernel answered with port unreachable")
	}
	if got := receiveN(t, n.a, 1); len(got) != 1 {
		t.Errorf("with ListenDiscard: the link received %d frames, want 1", len(got))
	}
	// A second one on the same port fails: the port is taken.
	if err := n.pair.A.Do(func() error {
		d2, err := ListenDiscard(roceV2Port)
		if err == nil {
			d2.Close()
		}
		return err
	}); !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("second ListenDiscard = %v, want EADDRINUSE", err)
	}
	for i := 0; i < 2; i++ {
		if err := d.Close(); err != nil {
			t.Fatalf("Discard.Close: %v", err)
		}
	}
	if !refused() {
		t.Errorf("without ListenDiscard: no port unreachable came back (the test shows nothing)")
	}
	if got := receiveN(t, n.a, 1); len(got) != 1 {
		t.Errorf("without ListenDiscard: the link received %d frames, want 1", len(got))
	}
}

// TestTxWait fills the socket's send buffer (a token bucket of 8 kbit/s
// holds the frames) and checks that Transmit waits TxWait, then drops
// the rest of the batch without an error, counting them.
func TestTxWait(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{SocketBuffer: 1, TxWait: 30 * time.Millisecond})
	out, err := exec.Command("tc", "-n", n.pair.B.Name, "qdisc", "replace", "dev", n.pair.B.Ifname, "root",
		"tbf", "rate", "8kbit", "burst", "1600", "latency", "5s").CombinedOutput()
	if err != nil {
		t.Skipf("no tbf qdisc to hold frames: %v: %s", err, out)
	}
	bufs := make([][]byte, 64)
	k := n.b.Alloc(bufs)
	for i := range bufs[:k] {
		bufs[i] = n.ba.build(bufs[i], frameSpec{size: 1400, seed: byte(i)})
	}
	start := time.Now()
	sent, err := n.b.Transmit(bufs[:k])
	elapsed := time.Since(start)
	if err != nil {
		t.Errorf("Transmit with a full queue: %v, want no error (transient)", err)
	}
	st := n.b.Stats()
	if sent == k || st.TxDropped != uint64(k-sent) || st.Extra["tx_retries"] == 0 {
		t.Errorf("Transmit = %d of %d; TxDropped %d, tx_retries %d; want some dropped after retries",
			sent, k, st.TxDropped, st.Extra["tx_retries"])
	}
	// It gave up (the counters above) and not before TxWait; how much
	// later depends on the machine's load.
	if elapsed < 30*time.Millisecond {
		t.Errorf("Transmit gave up after %v, before TxWait (30ms)", elapsed)
	}
	if got := n.b.Alloc(bufs); got != k {
		t.Errorf("Alloc after the drops = %d, want all %d buffers back", got, k)
	}
	n.b.Release(bufs[:k])
}

// TestConcurrentClose races Wakeup, Stats and Info from other goroutines
// against the owner's Receive and against Close (run with -race).
func TestConcurrentClose(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{})
	stop := make(chan struct{})
	finished := make(chan struct{}, 4)
	for g := 0; g < 3; g++ {
		go func() {
			defer func() { finished <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch g {
				case 0:
					n.a.Wakeup()
				case 1:
					_ = n.a.Stats()
				case 2:
					_ = n.a.Info()
				}
			}
		}()
	}
	go func() {
		defer func() { finished <- struct{}{} }()
		bufs := make([][]byte, 8)
		for {
			k, err := n.a.Receive(bufs, -1)
			if errors.Is(err, link.ErrClosed) {
				return
			}
			if err != nil {
				t.Errorf("Receive: %v", err)
				return
			}
			n.a.Release(bufs[:k])
		}
	}()
	send(t, n.b, n.ba, []frameSpec{{size: 100}, {size: 200}})
	time.Sleep(30 * time.Millisecond)
	if err := n.a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	time.Sleep(10 * time.Millisecond)
	close(stop)
	for i := 0; i < 4; i++ {
		select {
		case <-finished:
		case <-time.After(eventually):
			t.Fatal("a goroutine did not finish after Close")
		}
	}
}

// TestOutgoing checks Config.Outgoing: a capturing link on the sender sees
// the RoCE frames the host sends (and still none of its other traffic),
// while a plain link sees none of them.
func TestOutgoing(t *testing.T) {
	n := newTestNet(t, netns.Config{}, Config{})
	capture := openT(t, n.pair.A, Config{Outgoing: true})
	specs := []frameSpec{{size: 100, seed: 1}, {size: 300, ipv6: true, seed: 2}, {size: 200, dport: 4792, seed: 3}, {size: 1000, seed: 4}}
	want := send(t, n.a, n.ab, specs)
	roce := [][]byte{want[0], want[1], want[3]} // not the one to port 4792
	got := receiveN(t, capture, len(roce))
	got = append(got, receiveQuiet(t, capture, 50*time.Millisecond)...)
	if len(got) != len(roce) {
		t.Fatalf("capture saw %d outgoing frames, want %d", len(got), len(roce))
	}
	for i := range roce {
		if !bytes.Equal(got[i], roce[i]) {
			t.Errorf("captured frame %d:\n got %x\nwant %x", i, got[i], roce[i])
		}
	}
	if extra := receiveQuiet(t, n.a, 50*time.Millisecond); len(extra) != 0 {
		t.Errorf("the plain link on the sender received %d of its own frames", len(extra))
	}
	if got := receiveN(t, n.b, len(roce)); len(got) != len(roce) {
		t.Errorf("the peer received %d frames, want %d", len(got), len(roce))
	}
}
