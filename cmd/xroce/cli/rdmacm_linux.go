//go:build linux

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/roce"
)

// What the clones of librdmacm's examples (rping, ucmatose, udaddy,
// rdma_server, rdma_client) share: the device an address belongs to,
// address look-ups with getaddrinfo's errors, the rdma_cm event a failed
// connection would have been, and waits for completions that give up when
// the peer has gone quiet.

// cmPeerTimeout bounds every wait for a connected peer (a completion, a
// DREP, the end of an accept): the originals wait for ever there, a clone
// says the peer is gone. Waiting for a client to connect is not bounded.
// Tests shorten it.
var cmPeerTimeout = 30 * time.Second

// testHookListen, when set, is called once a tool listens: tests start
// the client then.
var testHookListen func()

func listening() {
	if testHookListen != nil {
		testHookListen()
	}
}

// exitInterrupted is the status of a tool stopped by SIGINT (the shell's
// 128 + 2 for the C tool killed by it).
const exitInterrupted = 130

// errPeerSilent is a wait for the peer that timed out.
var errPeerSilent = errors.New("the peer is silent")

// silentMsg is the line a clone prints when the peer went quiet.
func silentMsg(tool string) string {
	return fmt.Sprintf("%s: nothing from the peer for %v: giving up (is it still there?)", tool, cmPeerTimeout)
}

// lockedWriter serialises writes to w (rping -P prints from a goroutine
// per connection).
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// strerror is glibc's text of an errno: Go's, capitalised.
func strerror(errno syscall.Errno) string {
	s := errno.Error()
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		s = string(s[0]-'a'+'A') + s[1:]
	}
	return s
}

// perror prints what perror(3) prints for what and errno.
func perror(w io.Writer, what string, errno syscall.Errno) {
	fmt.Fprintf(w, "%s: %s\n", what, strerror(errno))
}

// gaiError is a failed getaddrinfo: its EAI_ code and gai_strerror text.
type gaiError struct {
	code int
	msg  string
}

func (e *gaiError) Error() string { return e.msg }

// getaddrinfo's errors that a look-up here can give.
var (
	eaiNoName  = &gaiError{-2, "Name or service not known"}
	eaiAgain   = &gaiError{-3, "Temporary failure in name resolution"}
	eaiService = &gaiError{-8, "Servname not supported for ai_socktype"}
)

// lookupAddr is getaddrinfo(host)'s first address; numeric only refuses
// names (AI_NUMERICHOST).
func lookupAddr(ctx context.Context, host string, numeric bool) (netip.Addr, *gaiError) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	if numeric {
		return netip.Addr{}, eaiNoName
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		var de *net.DNSError
		if err == nil || errors.As(err, &de) && de.IsNotFound {
			return netip.Addr{}, eaiNoName
		}
		return netip.Addr{}, eaiAgain
	}
	return ips[0].Unmap(), nil
}

// lookupPort is getaddrinfo's service: a number (its low 16 bits, as
// glibc's htons) or a TCP service name.
func lookupPort(service string) (uint16, *gaiError) {
	if n, err := strconv.ParseUint(service, 10, 64); err == nil {
		return uint16(n), nil
	}
	p, err := net.LookupPort("tcp", service)
	if err != nil {
		return 0, eaiService
	}
	return uint16(p), nil
}

// ifaceError is why no interface fits: the errno the kernel's rdma_cm
// gives for it, and the details.
type ifaceError struct {
	errno syscall.Errno
	err   error
}

func (e *ifaceError) Error() string { return e.err.Error() }

// cmInterface names the interface whose device a librdmacm program would
// use, as the kernel's rdma_cm binds an id: ifname if given; else the
// interface holding local (a bound or source address), if it is
// specified; else the interface of the route to peer, if valid; else the
// only interface with an address.
func cmInterface(ifname string, local, peer netip.Addr) (string, *ifaceError) {
	switch {
	case ifname != "":
		return ifname, nil
	case local.IsValid() && !local.IsUnspecified():
		name, err := interfaceOf(local)
		if err != nil {
			return "", &ifaceError{syscall.EADDRNOTAVAIL, err}
		}
		return name, nil
	case peer.IsValid():
		name, err := routeInterface(peer)
		if err != nil {
			return "", &ifaceError{syscall.ENETUNREACH, err}
		}
		if ifc, err := net.InterfaceByName(name); err == nil && ifc.Flags&net.FlagLoopback != 0 {
			return "", &ifaceError{syscall.ENODEV, fmt.Errorf("%v is an address of this host, which xroce cannot connect to", peer)}
		}
		return name, nil
	}
	name, err := defaultInterface("")
	if err != nil {
		return "", &ifaceError{syscall.ENODEV, err}
	}
	return name, nil
}

// interfaceOf names the interface that has address a.
func interfaceOf(a netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, x := range addrs {
			if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr().Unmap() == a.Unmap().WithZone("") {
				return ifc.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no interface has the address %v", a)
}

// cmDevice is an open device and its connection manager.
type cmDevice struct {
	dev   *roce.Device
	agent *cm.Agent
}

// openCM opens the RoCE device on ifname and starts its CM agent.
func openCM(ifname string) (*cmDevice, error) {
	dev, err := roce.Open(ifname, roce.Config{})
	if err != nil {
		return nil, fmt.Errorf("cannot open a RoCE device on %s: %w", ifname, err)
	}
	a, err := cm.Open(dev, cm.AgentConfig{})
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("cannot start the connection manager on %s: %w", ifname, err)
	}
	return &cmDevice{dev: dev, agent: a}, nil
}

// Close stops the agent (its last DREPs leave first) and the device.
func (d *cmDevice) Close() {
	d.agent.Close()
	d.dev.Close()
}

// cmEvent is the rdma_cm event, and its status, by which librdmacm would
// have reported err of Dial, Accept or ResolveUD: the peer's REJ reason,
// the SIDR_REP's status (the kernel's cma_sidr_rep_handler makes any but
// "valid" UNREACHABLE), -ETIMEDOUT for a peer that never answered, an
// errno otherwise.
func cmEvent(err error) (string, int) {
	var rej *cm.RejectError
	var sidr *cm.SIDRError
	switch {
	case errors.As(err, &rej):
		return "RDMA_CM_EVENT_REJECTED", int(rej.Reason)
	case errors.As(err, &sidr):
		return "RDMA_CM_EVENT_UNREACHABLE", int(sidr.Status)
	case errors.Is(err, cm.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return "RDMA_CM_EVENT_UNREACHABLE", -int(syscall.ETIMEDOUT)
	case errors.Is(err, cm.ErrDisconnected), errors.Is(err, cm.ErrClosed):
		return "RDMA_CM_EVENT_DISCONNECTED", 0
	}
	return "RDMA_CM_EVENT_CONNECT_ERROR", -int(syscall.EINVAL)
}

// cmErrno is the errno a synchronous librdmacm call (rdma_connect,
// rdma_accept of the rdma_create_ep API) sets for err: ECONNREFUSED for a
// REJ, ETIMEDOUT for silence.
func cmErrno(err error) syscall.Errno {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		return syscall.ECONNREFUSED
	case errors.Is(err, cm.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.Is(err, cm.ErrDisconnected), errors.Is(err, cm.ErrClosed):
		return syscall.ECONNRESET
	}
	return syscall.EINVAL
}

// postErrno is the errno ibv_post_send or ibv_post_recv returns for err.
func postErrno(err error) int {
	if errors.Is(err, roce.ErrQueueFull) {
		return int(syscall.ENOMEM)
	}
	return int(syscall.EINVAL)
}

// resolvePeer is rdma_resolve_addr's half of a connection: the peer's
// Ethernet address within 2000 ms, as the originals ask.
func resolvePeer(ctx context.Context, dev *roce.Device, peer netip.Addr) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := dev.Resolve(ctx, peer)
	return err
}

// pollOne waits for one completion of cq and puts it in wc. It returns
// false with a nil error when done is closed and the CQ is empty (done
// may be nil), errPeerSilent after timeout without either, ctx's error
// when ctx ends.
func pollOne(ctx context.Context, cq *roce.CQ, wc []roce.WC, done <-chan struct{}, timeout time.Duration) (bool, error) {
	if cq.Poll(wc[:1]) == 1 {
		return true, nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		notify := cq.Notify()
		if cq.Poll(wc[:1]) == 1 {
			return true, nil
		}
		select {
		case <-notify:
		case <-done:
			if cq.Poll(wc[:1]) == 1 {
				return true, nil
			}
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-timer.C:
			if cq.Poll(wc[:1]) == 1 {
				return true, nil
			}
			return false, errPeerSilent
		}
	}
}

// cstring is the C string at the start of b: up to its first NUL.
func cstring(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
