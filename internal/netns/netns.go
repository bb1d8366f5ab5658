// Package netns builds small test networks out of Linux network namespaces:
// two hosts, each in its own named namespace, joined by a veth pair.
//
// It is what xroce's tests use when they need a real kernel link (AF_XDP,
// AF_PACKET, rxe interoperability) and what `xroce lab` uses to set up a lab.
// The namespaces are named (bind-mounted under /run/netns, as iproute2's
// `ip netns add` does), so `ip netns exec NAME ...` and `tc -n NAME ...` work
// on them. A veth pair (drivers/net/veth.c) moves frames between its two ends
// and supports XDP in native mode, which is what the AF_XDP link needs.
//
// Each host gets an address from 198.18.0.0/15 (RFC 2544's benchmarking
// range; by default 198.18.0.1/24 and 198.18.0.2/24), a fixed locally
// administered MAC address, a permanent neighbour entry for its peer (so no
// ARP or neighbour discovery is ever needed or seen) and rp_filter off. IPv6
// is disabled on the veth unless Config.IPv6 is set, so that no router
// solicitations or MLD reports appear on the wire during a test; with IPv6 set
// each host gets its EUI-64 link-local address (which is also the address of
// the default RoCE v2 GID, index 0, in the kernel's rxe driver) without
// duplicate address detection.
//
// Names are unique per process and per call ("xr<pid>-<n>a", "xr<pid>-<n>b"),
// so tests in different packages, which `go test` runs in parallel processes,
// do not collide. Sweep removes namespaces left behind by dead processes.
//
// The package needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's
// `ip` and `tc` commands. It is Linux only.
package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Sentinel errors; New wraps them so that callers (and NewT) can tell a
// missing feature or privilege from a real failure.
var (
	// ErrPermission means the caller lacks the privileges to create
	// namespaces or links (not root, no CAP_SYS_ADMIN/CAP_NET_ADMIN).
	ErrPermission = errors.New("netns: permission denied")
	// ErrUnsupported means the kernel or system lacks network namespaces,
	// veth, or the iproute2 tools.
	ErrUnsupported = errors.New("netns: network namespaces or veth unavailable")
	// ErrNetemUnavailable means the kernel has no netem qdisc (sch_netem).
	ErrNetemUnavailable = errors.New("netns: netem qdisc unavailable (sch_netem not in kernel)")
	// ErrClosed is returned by a Host's methods after its Pair was closed.
	ErrClosed = errors.New("netns: pair closed")
)

// DefaultPrefix is the network the hosts get when Config.Prefix is zero.
var DefaultPrefix = netip.MustParsePrefix("198.18.0.0/24")

// allowed is the only range hosts may be given addresses from.
var allowed = netip.MustParsePrefix("198.18.0.0/15")

// Config describes a Pair. The zero value is a 1500-byte MTU, single-queue
// veth with 198.18.0.1/24 and 198.18.0.2/24, IPv4 only.
type Config struct {
	MTU    int          // veth MTU in bytes (IP packet size); 0 = 1500
	Prefix netip.Prefix // network of both hosts, inside 198.18.0.0/15, at most /30; zero = DefaultPrefix
	IPv6   bool         // keep IPv6 on and add link-local addresses (and neighbour entries) too
	Queues int          // veth RX and TX queues per end; 0 = 1
}

// Host is one end of a Pair: a named network namespace holding one end of
// the veth pair. Its fields are set by New and must not be changed (SetMTU
// updates MTU). Do, Command, SetNetem, ClearNetem and SetMTU may be called
// from any goroutine.
type Host struct {
	Name   string           // network namespace name, for `ip netns exec Name`
	Ifname string           // the veth end inside the namespace
	Index  int              // its interface index (inside the namespace)
	IP     netip.Addr       // IPv4 address
	Prefix netip.Prefix     // IP with the network's prefix length
	IP6    netip.Addr       // IPv6 link-local address with zone Ifname; invalid unless Config.IPv6
	MAC    net.HardwareAddr // the veth end's Ethernet address
	MTU    int              // the veth end's MTU
	Peer   *Host            // the other host

	pair *Pair
	ns   vnetns.NsHandle // open namespace file; -1 when not open
	nl   *netlink.Handle // rtnetlink socket inside the namespace
}

// Pair is two hosts joined by a veth pair.
type Pair struct {
	A, B *Host

	// mu guards closed and the hosts' ns and nl handles: a Do holds it
	// shared while entering the namespace so Close cannot close the
	// namespace file under it.
	mu     sync.RWMutex
	closed bool
}

var counter atomic.Uint64

// testHook, when set by this package's tests, is called after each step of
// New and makes New fail (and unwind) if it returns an error.
var testHook func(step string) error

func step(name string) error {
	if testHook != nil {
		return testHook(name)
	}
	return nil
}

// names returns fresh namespace (and interface) names for the two hosts.
// Interface names must fit IFNAMSIZ-1 = 15 bytes.
func names() (string, string, error) {
	n := counter.Add(1)
	base := "xr" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(n, 36)
	if len(base)+1 > unix.IFNAMSIZ-1 {
		return "", "", fmt.Errorf("netns: name %sa longer than %d bytes", base, unix.IFNAMSIZ-1)
	}
	return base + "a", base + "b", nil
}

// New creates two network namespaces joined by a veth pair, configured as
// described in the package doc. If any step fails, everything created so far
// is removed before New returns the error.
func New(cfg Config) (_ *Pair, err error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 68 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("netns: MTU %d out of range 68..65535", cfg.MTU)
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.Queues < 1 || cfg.Queues > 1024 {
		return nil, fmt.Errorf("netns: %d queues out of range 1..1024", cfg.Queues)
	}
	if !cfg.Prefix.IsValid() {
		cfg.Prefix = DefaultPrefix
	}
	cfg.Prefix = cfg.Prefix.Masked()
	if !cfg.Prefix.Addr().Is4() || cfg.Prefix.Bits() < allowed.Bits() || cfg.Prefix.Bits() > 30 ||
		!allowed.Contains(cfg.Prefix.Addr()) {
		return nil, fmt.Errorf("netns: prefix %s must be an IPv4 network of /15../30 inside %s", cfg.Prefix, allowed)
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return nil, fmt.Errorf("netns: %w: %w", ErrUnsupported, err)
	}
	nameA, nameB, err := names()
	if err != nil {
		return nil, err
	}
	ipA := cfg.Prefix.Addr().Next()
	ipB := ipA.Next()
	p := &Pair{}
	p.A = newHost(p, nameA, ipA, cfg)
	p.B = newHost(p, nameB, ipB, cfg)
	p.A.Peer, p.B.Peer = p.B, p.A

	defer func() {
		if err != nil {
			if cerr := p.Close(); cerr != nil {
				err = fmt.Errorf("%w (and unwinding: %w)", err, cerr)
			}
		}
	}()
	for _, h := range []*Host{p.A, p.B} {
		if err := h.create(); err != nil {
			return nil, err
		}
		if err := step("create " + h.Name[len(h.Name)-1:]); err != nil {
			return nil, err
		}
	}
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name:         p.A.Ifname,
			MTU:          cfg.MTU,
			HardwareAddr: p.A.MAC,
			NumTxQueues:  cfg.Queues,
			NumRxQueues:  cfg.Queues,
			TxQLen:       -1,
		},
		PeerName:         p.B.Ifname,
		PeerHardwareAddr: p.B.MAC,
		PeerNamespace:    netlink.NsFd(p.B.ns),
		PeerTxQLen:       -1,
		PeerNumTxQueues:  uint32(cfg.Queues),
		PeerNumRxQueues:  uint32(cfg.Queues),
		PeerMTU:          uint32(cfg.MTU),
	}
	if err := p.A.nl.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("netns: add veth %s/%s: %w", p.A.Ifname, p.B.Ifname, classify(err))
	}
	if err := step("veth"); err != nil {
		return nil, err
	}
	for _, h := range []*Host{p.A, p.B} {
		if err := h.configure(cfg.IPv6); err != nil {
			return nil, err
		}
		if err := step("configure " + h.Name[len(h.Name)-1:]); err != nil {
			return nil, err
		}
	}
	for _, h := range []*Host{p.A, p.B} {
		if err := h.waitReady(5 * time.Second); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func newHost(p *Pair, name string, ip netip.Addr, cfg Config) *Host {
	a := ip.As4()
	// Locally administered, unicast: 02:78:72 ("xr") then the low 3 bytes
	// of the IPv4 address, so a frame dump tells which host sent it.
	mac := net.HardwareAddr{0x02, 0x78, 0x72, a[1], a[2], a[3]}
	h := &Host{
		Name:   name,
		Ifname: name,
		IP:     ip,
		Prefix: netip.PrefixFrom(ip, cfg.Prefix.Bits()),
		MAC:    mac,
		MTU:    cfg.MTU,
		pair:   p,
		ns:     vnetns.None(),
	}
	if cfg.IPv6 {
		h.IP6 = linkLocal(mac).WithZone(name)
	}
	return h
}

// linkLocal returns the modified EUI-64 link-local address of mac (RFC 4291
// appendix A), the same one the kernel would generate.
func linkLocal(mac net.HardwareAddr) netip.Addr {
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8], b[9], b[10] = mac[0]^0x02, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// create makes the host's named namespace and opens it.
func (h *Host) create() error {
	if out, err := exec.Command("ip", "netns", "add", h.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: ip netns add %s: %w", h.Name, classifyExec(err, out))
	}
	ns, err := vnetns.GetFromName(h.Name)
	if err != nil {
		return fmt.Errorf("netns: open %s: %w", h.Name, classify(err))
	}
	h.ns = ns
	nl, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netns: netlink in %s: %w", h.Name, classify(err))
	}
	h.nl = nl
	return nil
}

// configure sets up the host's end of the veth once both ends exist.
func (h *Host) configure(ipv6 bool) error {
	err := h.Do(func() error {
		for _, s := range [][2]string{
			{"net/ipv4/conf/all/rp_filter", "0"},
			{"net/ipv4/conf/default/rp_filter", "0"},
			{"net/ipv4/conf/" + h.Ifname + "/rp_filter", "0"},
		} {
			if err := sysctl(s[0], s[1]); err != nil {
				return err
			}
		}
		v6 := [][2]string{{"net/ipv6/conf/" + h.Ifname + "/disable_ipv6", "1"}}
		if ipv6 {
			v6 = [][2]string{
				{"net/ipv6/conf/" + h.Ifname + "/disable_ipv6", "0"},
				{"net/ipv6/conf/" + h.Ifname + "/accept_dad", "0"},
				{"net/ipv6/conf/" + h.Ifname + "/accept_ra", "0"},
				{"net/ipv6/conf/" + h.Ifname + "/addr_gen_mode", "1"}, // none: we add the address
			}
		}
		for _, s := range v6 {
			if err := sysctl(s[0], s[1]); err != nil {
				if errors.Is(err, os.ErrNotExist) && !ipv6 {
					break // kernel without IPv6: nothing to disable
				}
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("netns: sysctl in %s: %w", h.Name, err)
	}
	link, err := h.nl.LinkByName(h.Ifname)
	if err != nil {
		return fmt.Errorf("netns: find %s: %w", h.Ifname, classify(err))
	}
	h.Index = link.Attrs().Index
	addr := &netlink.Addr{IPNet: ipNet(h.Prefix)}
	if err := h.nl.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("netns: add %s to %s: %w", h.Prefix, h.Ifname, classify(err))
	}
	if ipv6 {
		a := &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(h.IP6.WithZone(""), 64)), Flags: unix.IFA_F_NODAD}
		if err := h.nl.AddrAdd(link, a); err != nil {
			return fmt.Errorf("netns: add %s to %s: %w", h.IP6, h.Ifname, classify(err))
		}
	}
	lo, err := h.nl.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("netns: find lo: %w", classify(err))
	}
	if err := h.nl.LinkSetUp(lo); err != nil {
		return fmt.Errorf("netns: set lo up: %w", classify(err))
	}
	if err := h.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("netns: set %s up: %w", h.Ifname, classify(err))
	}
	neigh := []netip.Addr{h.Peer.IP}
	if ipv6 {
		neigh = append(neigh, h.Peer.IP6.WithZone(""))
	}
	for _, ip := range neigh {
		family := unix.AF_INET
		if ip.Is6() {
			family = unix.AF_INET6
		}
		n := &netlink.Neigh{
			LinkIndex:    h.Index,
			Family:       family,
			State:        netlink.NUD_PERMANENT,
			IP:           net.IP(ip.AsSlice()),
			HardwareAddr: h.Peer.MAC,
		}
		if err := h.nl.NeighSet(n); err != nil {
			return fmt.Errorf("netns: neighbour %s on %s: %w", ip, h.Ifname, classify(err))
		}
	}
	return nil
}

// waitReady waits until the veth end can transmit. A veth end gets carrier
// only when its peer is up, and the kernel attaches the device's real qdisc
// only later, from the link-watch work queue (net/core/link_watch.c); until
// then the root qdisc is noop_qdisc, which drops every packet sent.
func (h *Host) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		link, err := h.nl.LinkByIndex(h.Index)
		if err != nil {
			return fmt.Errorf("netns: find %s: %w", h.Ifname, classify(err))
		}
		ready := link.Attrs().OperState == netlink.OperUp
		if ready {
			qdiscs, err := h.nl.QdiscList(link)
			if err != nil {
				return fmt.Errorf("netns: qdiscs of %s: %w", h.Ifname, classify(err))
			}
			for _, q := range qdiscs {
				if q.Attrs().Parent == netlink.HANDLE_ROOT && q.Type() == "noop" {
					ready = false
				}
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netns: %s not ready (oper state %s) after %v", h.Ifname, link.Attrs().OperState, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

func ipNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

// sysctl writes value to /proc/sys/key; inside Do it acts on the namespace
// of the calling thread.
func sysctl(key, value string) error {
	f, err := os.OpenFile("/proc/sys/"+key, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

// Close removes both namespaces, which destroys the veth pair with them.
// The kernel frees a namespace once nothing refers to it any more, so a
// socket made inside Do and still open keeps its namespace alive (but no
// longer named) until it is closed. Close is idempotent.
func (p *Pair) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for _, h := range []*Host{p.A, p.B} {
		if h.nl != nil {
			h.nl.Close()
			h.nl = nil
		}
		if h.ns.IsOpen() {
			if err := h.ns.Close(); err != nil {
				errs = append(errs, fmt.Errorf("netns: close %s: %w", h.Name, err))
			}
			h.ns = vnetns.None()
		}
		if err := remove(h.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// remove deletes a named namespace if it exists.
func remove(name string) error {
	if _, err := os.Stat(nsPath(name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
		if _, serr := os.Stat(nsPath(name)); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("netns: ip netns delete %s: %w", name, classifyExec(err, out))
	}
	return nil
}

func nsPath(name string) string { return "/run/netns/" + name }

// Exists reports whether a namespace with this name is present in /run/netns.
func Exists(name string) bool {
	_, err := os.Stat(nsPath(name))
	return err == nil
}

// Sweep removes namespaces that this package created in processes that no
// longer run ("xr<pid>-..." with a dead pid), for example after a test binary
// was killed. It returns the names it removed.
func Sweep() ([]string, error) {
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: sweep: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		pid, ok := ownerPID(e.Name())
		if !ok || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); err == nil || errors.Is(err, unix.EPERM) {
			continue // still running
		}
		if err := remove(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// ownerPID parses the pid out of a name made by names.
func ownerPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "xr")
	if !ok {
		return 0, false
	}
	pidStr, n, ok := strings.Cut(rest, "-")
	if !ok || len(n) < 2 || (n[len(n)-1] != 'a' && n[len(n)-1] != 'b') {
		return 0, false
	}
	if _, err := strconv.ParseUint(n[:len(n)-1], 36, 64); err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// classify wraps err with ErrPermission or ErrUnsupported when it says so.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EAFNOSUPPORT):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return err
}

// classifyExec turns a failed iproute2 command into an error carrying its
// output and, where it applies, a sentinel.
func classifyExec(err error, out []byte) error {
	msg := strings.TrimSpace(string(out))
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return fmt.Errorf("%w: iproute2: %w", ErrUnsupported, err)
	case strings.Contains(msg, "Operation not permitted"), strings.Contains(msg, "Permission denied"):
		return fmt.Errorf("%w: %w: %s", ErrPermission, err, msg)
	}
	if msg == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, msg)
}
