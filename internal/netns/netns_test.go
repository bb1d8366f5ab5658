package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ours lists the namespaces this test process has in /run/netns.
func ours(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("read /run/netns: %v", err)
	}
	prefix := "xr" + strconv.Itoa(os.Getpid()) + "-"
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// udpConn opens a UDP socket bound to ip inside h's namespace.
func udpConn(t testing.TB, h *Host, ip netip.Addr) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := h.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", ip, h.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange sends a datagram each way between sockets in A and B bound to
// ipA and ipB and checks they arrive intact from the right source.
func exchange(t testing.TB, p *Pair, ipA, ipB netip.Addr, size int) {
	t.Helper()
	ca := udpConn(t, p.A, ipA)
	cb := udpConn(t, p.B, ipB)
	msg := bytes.Repeat([]byte{0xa5}, size)
	copy(msg, p.A.Name)
	// A link-local destination's zone must name the sender's interface,
	// and the name is turned into an index in the calling thread's
	// namespace (through Go's zone cache, which all namespaces of the
	// process share): so each side sends from inside its own namespace,
	// naming its own interface.
	send := func(h *Host, c *net.UDPConn, b []byte, to netip.AddrPort, zone string) {
		t.Helper()
		to = netip.AddrPortFrom(to.Addr().WithZone(zone), to.Port())
		if err := h.Do(func() error {
			_, err := c.WriteToUDPAddrPort(b, to)
			return err
		}); err != nil {
			t.Fatalf("send from %s to %s: %v", h.Name, to, err)
		}
	}
	// UDP promises nothing: send again every 200 ms, for at most 5 s,
	// until B has the datagram. (Right after an IPv6 address is added,
	// a first datagram is sometimes dropped by B as an address error.)
	buf := make([]byte, size+100)
	var n int
	var from netip.AddrPort
	var err error
	for try := 0; try < 25; try++ {
		send(p.A, ca, msg, cb.LocalAddr().(*net.UDPAddr).AddrPort(), ipA.Zone())
		cb.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, from, err = cb.ReadFromUDPAddrPort(buf); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("receive in B: %v", err)
	}
	if !bytes.Equal(buf[:n], msg) {
		t.Fatalf("B got %d bytes %q..., want %d bytes", n, buf[:min(n, 16)], len(msg))
	}
	if from.Addr().WithZone("") != ipA.WithZone("") {
		t.Fatalf("B got datagram from %s, want %s", from, ipA)
	}
	send(p.B, cb, msg[:1], from, ipB.Zone())
	ca.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _, err := ca.ReadFromUDPAddrPort(buf); err != nil || n != 1 {
		t.Fatalf("receive in A: %d bytes, %v", n, err)
	}
}

func TestNewDefault(t *testing.T) {
	p := NewT(t, Config{})
	for _, tc := range []struct {
		h   *Host
		ip  string
		mac string
	}{
		{p.A, "198.18.0.1", "02:78:72:12:00:01"},
		{p.B, "198.18.0.2", "02:78:72:12:00:02"},
	} {
		h := tc.h
		if h.IP.String() != tc.ip || h.Prefix.String() != tc.ip+"/24" {
			t.Errorf("%s: IP %s prefix %s, want %s/24", h.Name, h.IP, h.Prefix, tc.ip)
		}
		if h.MAC.String() != tc.mac {
			t.Errorf("%s: MAC %s, want %s", h.Name, h.MAC, tc.mac)
		}
		if !Exists(h.Name) {
			t.Errorf("%s: not in /run/netns", h.Name)
		}
		link, err := h.nl.LinkByName(h.Ifname)
		if err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		a := link.Attrs()
		if a.Index != h.Index || a.MTU != 1500 || a.HardwareAddr.String() != tc.mac || a.Flags&net.FlagUp == 0 {
			t.Errorf("%s: link index %d mtu %d mac %s flags %v, want %d 1500 %s up", h.Name, a.Index, a.MTU, a.HardwareAddr, a.Flags, h.Index, tc.mac)
		}
		if link.Type() != "veth" {
			t.Errorf("%s: link type %q, want veth", h.Name, link.Type())
		}
		lo, err := h.nl.LinkByName("lo")
		if err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s: lo not up (%v)", h.Name, err)
		}
		neighs, err := h.nl.NeighList(h.Index, unix.AF_INET)
		if err != nil {
			t.Fatalf("%s: neighbours: %v", h.Name, err)
		}
		found := false
		for _, n := range neighs {
			if n.IP.Equal(h.Peer.IP.AsSlice()) && n.HardwareAddr.String() == h.Peer.MAC.String() && n.State == netlink.NUD_PERMANENT {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no permanent neighbour %s → %s in %v", h.Name, h.Peer.IP, h.Peer.MAC, neighs)
		}
		err = h.Do(func() error {
			for key, want := range map[string]string{
				"net/ipv4/conf/all/rp_filter":                     "0",
				"net/ipv4/conf/" + h.Ifname + "/rp_filter":        "0",
				"net/ipv6/conf/" + h.Ifname + "/disable_ipv6":     "1",
				"net/ipv4/conf/" + h.Ifname + "/forwarding":       "0",
				"net/ipv6/conf/" + h.Ifname + "/hop_limit":        "64",
				"net/ipv4/conf/" + h.Ifname + "/accept_redirects": "1",
			} {
				b, err := os.ReadFile("/proc/sys/" + key)
				if err != nil {
					return err
				}
				if got := strings.TrimSpace(string(b)); got != want {
					t.Errorf("%s: %s = %s, want %s", h.Name, key, got, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: sysctl: %v", h.Name, err)
		}
	}
	exchange(t, p, p.A.IP, p.B.IP, 1000)
}

func TestConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		a, b string
	}{
		{"jumbo", Config{MTU: 9000}, "198.18.0.1", "198.18.0.2"},
		{"small MTU", Config{MTU: 1280}, "198.18.0.1", "198.18.0.2"},
		{"other prefix", Config{Prefix: netip.MustParsePrefix("198.19.7.0/24")}, "198.19.7.1", "198.19.7.2"},
		{"unmasked /30", Config{Prefix: netip.MustParsePrefix("198.18.200.9/30")}, "198.18.200.9", "198.18.200.10"},
		{"two queues", Config{Queues: 2}, "198.18.0.1", "198.18.0.2"},
		{"ipv6", Config{IPv6: true}, "198.18.0.1", "198.18.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewT(t, tc.cfg)
			if p.A.IP.String() != tc.a || p.B.IP.String() != tc.b {
				t.Errorf("IPs %s, %s; want %s, %s", p.A.IP, p.B.IP, tc.a, tc.b)
			}
			mtu := tc.cfg.MTU
			if mtu == 0 {
				mtu = 1500
			}
			queues := max(tc.cfg.Queues, 1)
			for _, h := range []*Host{p.A, p.B} {
				link, err := h.nl.LinkByName(h.Ifname)
				if err != nil {
					t.Fatal(err)
				}
				a := link.Attrs()
				if a.MTU != mtu || h.MTU != mtu {
					t.Errorf("%s: MTU %d (field %d), want %d", h.Name, a.MTU, h.MTU, mtu)
				}
				if a.NumTxQueues != queues || a.NumRxQueues != queues {
					t.Errorf("%s: %d tx / %d rx queues, want %d", h.Name, a.NumTxQueues, a.NumRxQueues, queues)
				}
				if tc.cfg.IPv6 {
					addrs, err := h.nl.AddrList(link, unix.AF_INET6)
					if err != nil {
						t.Fatal(err)
					}
					if len(addrs) != 1 || addrs[0].IP.String() != h.IP6.WithZone("").String() {
						t.Errorf("%s: IPv6 addresses %v, want only %s", h.Name, addrs, h.IP6)
					}
				} else if h.IP6.IsValid() {
					t.Errorf("%s: IP6 %s set without Config.IPv6", h.Name, h.IP6)
				}
			}
			exchange(t, p, p.A.IP, p.B.IP, mtu-28) // largest unfragmented datagram
			if tc.cfg.IPv6 {
				exchange(t, p, p.A.IP6, p.B.IP6, 1000)
			}
		})
	}
}

func TestBadConfig(t *testing.T) {
	before := len(ours(t))
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"outside 198.18/15", Config{Prefix: netip.MustParsePrefix("10.0.0.0/24")}},
		{"wider than /15", Config{Prefix: netip.MustParsePrefix("198.16.0.0/14")}},
		{"/31", Config{Prefix: netip.MustParsePrefix("198.18.0.0/31")}},
		{"IPv6 prefix", Config{Prefix: netip.MustParsePrefix("2001:2::/64")}},
		{"MTU too small", Config{MTU: 10}},
		{"MTU too big", Config{MTU: 70000}},
		{"negative queues", Config{Queues: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if err == nil {
				p.Close()
				t.Fatalf("New(%+v) succeeded, want error", tc.cfg)
			}
		})
	}
	if n := len(ours(t)); n != before {
		t.Errorf("%d namespaces after bad configs, want %d", n, before)
	}
}

// TestUnwind makes New fail after each of its steps and checks that nothing
// is left behind.
func TestUnwind(t *testing.T) {
	NewT(t, Config{}).Close() // skip here if namespaces are unavailable
	before := ours(t)
	steps := []string{"create a", "create b", "veth", "configure a", "configure b"}
	for _, s := range steps {
		t.Run(s, func(t *testing.T) {
			boom := errors.New("injected failure")
			testHook = func(step string) error {
				if step == s {
					return boom
				}
				return nil
			}
			defer func() { testHook = nil }()
			p, err := New(Config{IPv6: true})
			if !errors.Is(err, boom) {
				if p != nil {
					p.Close()
				}
				t.Fatalf("New: %v, want %v", err, boom)
			}
			if left := ours(t); len(left) != len(before) {
				t.Errorf("namespaces left after failure at %q: %v", s, left)
			}
		})
	}
}

func TestManyPairs(t *testing.T) {
	before := len(ours(t))
	var pairs []*Pair
	for range 8 {
		pairs = append(pairs, NewT(t, Config{}))
	}
	seen := map[string]bool{}
	for _, p := range pairs {
		for _, h := range []*Host{p.A, p.B} {
			if seen[h.Name] {
				t.Errorf("name %s used twice", h.Name)
			}
			seen[h.Name] = true
		}
	}
	if n := len(ours(t)) - before; n != 16 {
		t.Errorf("%d new namespaces, want 16", n)
	}
	// Pairs are isolated: the same addresses work in each at once.
	for _, p := range pairs {
		exchange(t, p, p.A.IP, p.B.IP, 100)
	}
	for _, p := range pairs {
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if Exists(p.A.Name) || Exists(p.B.Name) {
			t.Errorf("%s or %s still exists after Close", p.A.Name, p.B.Name)
		}
		if err := p.A.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
			t.Errorf("Do after Close: %v, want ErrClosed", err)
		}
		if err := p.B.SetMTU(1400); !errors.Is(err, ErrClosed) {
			t.Errorf("SetMTU after Close: %v, want ErrClosed", err)
		}
	}
	if n := len(ours(t)); n != before {
		t.Errorf("%d namespaces after Close, want %d", n, before)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for name := range seen {
		if strings.Contains(string(out), name) {
			t.Errorf("ip netns list still shows %s", name)
		}
	}
}

func TestConcurrentNew(t *testing.T) {
	NewT(t, Config{}).Close()
	before := len(ours(t))
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			p, err := New(Config{Queues: 1 + i%2})
			if err != nil {
				errs <- err
				return
			}
			defer p.Close()
			ct := &collectT{TB: t}
			defer func() { // runs also after ct.Fatalf's Goexit
				for _, f := range ct.cleanup {
					f()
				}
				if ct.failed != "" {
					errs <- fmt.Errorf("pair %s: %s", p.A.Name, ct.failed)
				}
			}()
			exchange(ct, p, p.A.IP, p.B.IP, 500)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := len(ours(t)); got != before {
		t.Errorf("%d namespaces after concurrent pairs closed, want %d", got, before)
	}
}

// collectT lets a helper that calls Fatalf run in another goroutine.
type collectT struct {
	testing.TB
	mu      sync.Mutex
	cleanup []func()
	failed  string
}

func (c *collectT) Helper() {}
func (c *collectT) Fatalf(format string, args ...any) {
	c.mu.Lock()
	c.failed = fmt.Sprintf(format, args...)
	c.mu.Unlock()
	runtime.Goexit()
}
func (c *collectT) Cleanup(f func()) { c.cleanup = append(c.cleanup, f) }

// TestDoThreads checks that Do never leaves a thread of the process in a
// host's namespace, that sockets stay in theirs, and that panics propagate.
func TestDoThreads(t *testing.T) {
	p := NewT(t, Config{})
	self := func() string {
		s, err := os.Readlink("/proc/thread-self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	runtime.LockOSThread()
	root := self()
	runtime.UnlockOSThread()
	var inA string
	for range 50 {
		if err := p.A.Do(func() error { inA = self(); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if inA == root {
		t.Fatalf("Do ran in the root namespace %s", root)
	}
	// Every thread the runtime hands out now must be in the root namespace.
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := 0
	for range 64 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if self() != root {
				mu.Lock()
				bad++
				mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		})
	}
	wg.Wait()
	if bad != 0 {
		t.Errorf("%d goroutines ran on a thread outside the root namespace", bad)
	}

	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		p.B.Do(func() error { panic("boom") })
		t.Errorf("Do did not re-raise the panic")
	}()
	// t.FailNow (runtime.Goexit) inside Do ends the caller's goroutine too.
	exited := make(chan bool, 2)
	go func() {
		defer func() { exited <- true }()
		p.A.Do(func() error { runtime.Goexit(); return nil })
		exited <- false
	}()
	if !<-exited {
		t.Errorf("Goexit in fn did not end the calling goroutine")
	}
	want := errors.New("from fn")
	if err := p.B.Do(func() error { return want }); err != want {
		t.Errorf("Do returned %v, want fn's error", err)
	}
}

func TestCommand(t *testing.T) {
	p := NewT(t, Config{})
	out, err := p.B.Command("ip", "-o", "addr", "show", "dev", p.B.Ifname).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), p.B.Prefix.String()) {
		t.Errorf("ip addr in %s: %q does not mention %s", p.B.Name, out, p.B.Prefix)
	}
}

func TestSetMTU(t *testing.T) {
	p := NewT(t, Config{})
	if err := p.SetMTU(4000); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Host{p.A, p.B} {
		link, err := h.nl.LinkByName(h.Ifname)
		if err != nil {
			t.Fatal(err)
		}
		if link.Attrs().MTU != 4000 || h.MTU != 4000 {
			t.Errorf("%s: MTU %d (field %d), want 4000", h.Name, link.Attrs().MTU, h.MTU)
		}
	}
	exchange(t, p, p.A.IP, p.B.IP, 4000-28)
	if err := p.A.SetMTU(10); err == nil {
		t.Errorf("SetMTU(10) succeeded")
	}
}

func TestNetem(t *testing.T) {
	p := NewT(t, Config{})
	if err := p.A.ClearNetem(); err != nil {
		t.Fatalf("ClearNetem without netem: %v", err)
	}
	err := p.A.SetNetem("delay 50ms")
	if errors.Is(err, ErrNetemUnavailable) {
		t.Skipf("kernel has no netem: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tc", "-n", p.A.Name, "qdisc", "show", "dev", p.A.Ifname).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "netem") {
		t.Fatalf("qdisc after SetNetem: %s %v", out, err)
	}
	start := time.Now()
	exchange(t, p, p.A.IP, p.B.IP, 100)
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("round trip %v with 50ms netem delay", d)
	}
	if err := p.A.ClearNetem(); err != nil {
		t.Fatal(err)
	}
	if err := p.A.SetNetem("delay bogus"); err == nil || errors.Is(err, ErrNetemUnavailable) {
		t.Errorf("bad netem spec: %v, want a tc error", err)
	}
}

func TestSweep(t *testing.T) {
	NewT(t, Config{}).Close()
	// A finished child's pid stands for a crashed test process.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	dead := cmd.Process.Pid
	name := "xr" + strconv.Itoa(dead) + "-zzza"
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	defer remove(name)
	live := NewT(t, Config{})
	removed, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if !Exists(live.A.Name) || !Exists(live.B.Name) {
		t.Errorf("Sweep removed this process's namespaces")
	}
	if Exists(name) {
		t.Errorf("Sweep left %s (pid %d is dead); removed %v", name, dead, removed)
	}
}

func TestOwnerPID(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"xr123-1a", 123, true},
		{"xr4194304-zzzzb", 4194304, true},
		{"xr123-1c", 0, false},
		{"xr123-a", 0, false},
		{"xr-1a", 0, false},
		{"xrabc-1a", 0, false},
		{"ns1", 0, false},
		{"xr12-1_a", 0, false},
	} {
		pid, ok := ownerPID(tc.name)
		if pid != tc.pid || ok != tc.ok {
			t.Errorf("ownerPID(%q) = %d, %v; want %d, %v", tc.name, pid, ok, tc.pid, tc.ok)
		}
	}
}

func TestLinkLocal(t *testing.T) {
	for _, tc := range []struct{ mac, want string }{
		{"02:78:72:12:00:01", "fe80::78:72ff:fe12:1"},
		{"00:11:22:33:44:55", "fe80::211:22ff:fe33:4455"},
	} {
		mac, _ := net.ParseMAC(tc.mac)
		if got := linkLocal(mac).String(); got != tc.want {
			t.Errorf("linkLocal(%s) = %s, want %s", tc.mac, got, tc.want)
		}
	}
}
