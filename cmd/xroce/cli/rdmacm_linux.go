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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/roce"
)

// What the clones of librdmacm's examples (rping, ucmatose, udaddy,
// rdma_server, rdma_client) share: the device an address belongs to,
// address look-ups with getaddrinfo's errors, the rdma_cm event a failed
// connection would have been, accepts, connects and waits for completions
// that give up when the peer has gone quiet, and the release of a
// connection's resources. Below them, what ucmatose and udaddy share.

// cmPeerTimeout bounds every wait for a connected peer (a completion, a
// DREP, the end of an accept): the originals wait for ever there, a clone
// says the peer is gone. Waiting for a client to connect is not bounded.
// Tests shorten it.
var cmPeerTimeout = 30 * time.Second

// testHookListen, when set, is called once a tool listens: tests start
// the client then. Atomic, since a test may signal from a goroutine of its
// own while another part of it sets the hook.
var testHookListen atomic.Pointer[func()]

// listening tells the test hook, if any, that a tool listens.
func listening() {
	if h := testHookListen.Load(); h != nil {
		(*h)()
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
		name, err := device.RouteInterface(peer)
		if err != nil {
			return "", &ifaceError{syscall.ENETUNREACH, err}
		}
		if ifc, err := net.InterfaceByName(name); err == nil && ifc.Flags&net.FlagLoopback != 0 {
			return "", &ifaceError{syscall.ENODEV, fmt.Errorf("%v is an address of this host, which xroce cannot connect to", peer)}
		}
		return name, nil
	}
	name, err := device.DefaultInterface("")
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

// openCM opens the RoCE device on ifname (see openNIC) and starts its CM
// agent.
func openCM(w io.Writer, cmd, ifname string) (*cmDevice, error) {
	dev, err := device.OpenNIC(w, cmd, ifname, roce.Config{})
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

// cmAccept is rdma_accept: req accepted onto qp with p (nil for the
// defaults), waiting at most cmPeerTimeout for the RTU.
func cmAccept(ctx context.Context, req *cm.Request, qp *roce.QP, p *cm.ConnParam) (*cm.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, cmPeerTimeout)
	defer cancel()
	return req.Accept(ctx, qp, p)
}

// dial is rdma_connect of qp to dst, waiting at most twice cmPeerTimeout
// for the REP (the REQ is sent again meanwhile).
func (d *cmDevice) dial(ctx context.Context, dst netip.AddrPort, qp *roce.QP, opts *cm.DialOptions) (*cm.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*cmPeerTimeout)
	defer cancel()
	return d.agent.Dial(ctx, dst, qp, opts)
}

// release frees what a connection made, each part if it was made, in the
// order the parts depend on each other: the connection (as
// rdma_destroy_id), the QP, the MRs, the CQs, the PD.
func release(conn *cm.Conn, qp *roce.QP, mrs []*roce.MR, cqs []*roce.CQ, pd *roce.PD) {
	if conn != nil {
		conn.Close()
	}
	if qp != nil {
		qp.Destroy()
	}
	for _, m := range mrs {
		if m != nil {
			m.Dereg()
		}
	}
	for _, cq := range cqs {
		if cq != nil {
			cq.Destroy()
		}
	}
	if pd != nil {
		pd.Dealloc()
	}
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
		notify := cq.Arm()
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

// ucmatose and udaddy are rdma-core's cmatose.c and udaddy.c, the second
// made from the first: the same flags but for the port and port space,
// the same run around the client and the server (the device, found
// before anything is printed, from common.c's get_rdma_addr and
// create_first_event_channel), the same starts of run_server and
// run_client, create_message and poll_cqs's wait for a completion.

// cmatestOptions are the flags ucmatose and udaddy share.
type cmatestOptions struct {
	dst, src    string // -s (client mode), -b
	numeric     bool   // -f ip or gid: no name look-ups
	connections int    // -c
	count       int    // -C
	size        int    // -S
	tos         uint8  // -t
	setTOS      bool   //
	ifname      string // -d (xroce's)
}

// set reads op, as both mains do, if it is one of the shared flags, and
// says whether it was.
func (o *cmatestOptions) set(stderr io.Writer, op base.Option) bool {
	switch op.C {
	case 's':
		o.dst = op.Arg
	case 'b':
		o.src = op.Arg
	case 'f':
		switch {
		case hasPrefixFold(op.Arg, "ip"), hasPrefixFold(op.Arg, "gid"):
			o.numeric = true
		case !hasPrefixFold(op.Arg, "name"):
			fmt.Fprintln(stderr, "Warning: unknown address format")
		}
	case 'c':
		o.connections = base.Atoi(op.Arg)
	case 'C':
		o.count = base.Atoi(op.Arg)
	case 'S':
		o.size = base.Atoi(op.Arg)
	case 't':
		o.setTOS, o.tos = true, base.Strtoul8(op.Arg)
	case 'd':
		o.ifname = op.Arg
	default:
		return false
	}
	return true
}

// hasPrefixFold is strncasecmp(prefix, s, len(prefix)) == 0.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// cmatest is what a run of ucmatose or udaddy keeps besides its options
// and its nodes, as their struct cmatest.
type cmatest struct {
	name           string // the originals' prefix of their lines: "cmatose", "udaddy"
	stdout, stderr io.Writer
	count          int // message_count, which a message size of 0 sets to 0
	d              *cmDevice
	connectsLeft   int
	interrupted    bool
	silent         bool // a wait for the peer timed out: wait for it no more
}

// cmatestAddr is what start looked up: -b's address (local), -s's (peer)
// and the port; or the failure that the server or the client reports
// once started, of a look-up (gerr) or of an address that no interface
// has (ierr).
type cmatestAddr struct {
	local, peer netip.Addr
	port        uint16
	gerr        *gaiError
	ierr        *ifaceError
}

func (t *cmatest) printf(format string, a ...any) { fmt.Fprintf(t.stdout, format, a...) }

// start is what ucmatose and udaddy (cmd, the xroce command) do before
// they print anything: -c checked (the nodes' calloc refuses a negative
// count), -b's and -s's addresses and the port of service looked up, then
// the device opened, as librdmacm's: -d's, or that of -b, or of the route
// to -s, or the only one. A failed look-up or an address that no
// interface has is left in a for the server or the client to report; ok
// is false when the run ends here, with status 1, after the lines.
func (t *cmatest) start(ctx context.Context, cmd string, o *cmatestOptions, service string) (a cmatestAddr, ok bool) {
	if o.connections < 0 {
		t.printf("%s: unable to allocate memory for test nodes\n", t.name)
		return a, false
	}
	t.connectsLeft = o.connections
	if o.src != "" {
		a.local, a.gerr = lookupAddr(ctx, o.src, o.numeric)
	}
	if o.dst != "" && a.gerr == nil {
		a.peer, a.gerr = lookupAddr(ctx, o.dst, o.numeric)
	}
	if a.gerr == nil {
		a.port, a.gerr = lookupPort(service)
	}
	var ifname string
	if a.gerr == nil {
		ifname, a.ierr = cmInterface(o.ifname, a.local, a.peer)
	}
	if a.gerr != nil || a.ierr != nil && a.ierr.errno != syscall.ENODEV {
		return a, true
	}
	var err error
	switch {
	case a.ierr != nil && o.dst == "":
		err = fmt.Errorf("%v: name one with -d INTERFACE", a.ierr)
	case a.ierr != nil:
		err = a.ierr
	default:
		t.d, err = openCM(t.stderr, t.name, ifname)
	}
	if err != nil {
		fmt.Fprintf(t.stderr, "%s: %v\n", cmd, err)
		fmt.Fprintln(t.stderr, "No RDMA devices were detected")
		return a, false
	}
	return a, true
}

// close closes the device, if start opened it.
func (t *cmatest) close() {
	if t.d != nil {
		t.d.Close()
	}
}

// end is the end of main: the status of an interrupted run, or ret after
// printing it.
func (t *cmatest) end(ret int) int {
	if t.interrupted {
		return exitInterrupted
	}
	t.printf("test complete\n")
	t.printf("return status %d\n", ret)
	return ret
}

// allocNodes is alloc_nodes: n nodes, nothing made in them yet.
func allocNodes[N any](n int) []*N {
	nodes := make([]*N, n)
	for i := range nodes {
		nodes[i] = new(N)
	}
	return nodes
}

// listen is run_server's get_rdma_addr, rdma_bind_addr and rdma_listen
// on -b's address in port space ps: the listener, or the status of a
// failure after its lines.
func (t *cmatest) listen(a cmatestAddr, ps mad.PortSpace) (*cm.Listener, int) {
	if a.gerr != nil {
		t.printf("%s: getrdmaaddr error: %s\n", t.name, a.gerr.msg)
		return nil, a.gerr.code
	}
	if a.ierr != nil {
		perror(t.stderr, t.name+": bind address failed", a.ierr.errno)
		return nil, -1
	}
	l, err := t.d.agent.Listen(netip.AddrPortFrom(a.local, a.port), &cm.ListenOptions{PortSpace: ps})
	if err != nil {
		perror(t.stderr, t.name+": bind address failed", syscall.EADDRINUSE)
		return nil, -1
	}
	listening()
	return l, 0
}

// connecting is run_client's get_rdma_addr and the failure of its
// rdma_resolve_addr calls, with the line between them: 0 to go on, or the
// status after the failure's line.
func (t *cmatest) connecting(a cmatestAddr) int {
	if a.gerr != nil {
		t.printf("%s: getaddrinfo error: %s\n", t.name, a.gerr.msg)
		return a.gerr.code
	}
	t.printf("%s: connecting\n", t.name)
	if a.ierr != nil {
		perror(t.stderr, t.name+": failure getting addr", a.ierr.errno)
		return -1
	}
	return 0
}

// errAddr marks a node whose address did not resolve.
var errAddr = errors.New("address resolution failed")

// addrError prints the event of a node whose address did not resolve
// (errAddr), and returns its status.
func (t *cmatest) addrError() int {
	t.printf("%s: event: RDMA_CM_EVENT_ADDR_ERROR, error: %d\n", t.name, -int(syscall.ETIMEDOUT))
	return -int(syscall.ETIMEDOUT)
}

// eventError prints the rdma_cm event by which a connection or a SIDR
// resolution failed with err, and returns its status.
func (t *cmatest) eventError(err error) int {
	name, st := cmEvent(err)
	t.printf("%s: event: %s, error: %d\n", t.name, name, st)
	return st
}

// createMessage is create_message for messages of size bytes (-S): unless
// message_count is 0, which a size of 0 makes it, a buffer of n bytes
// registered on pd for local writes. It returns the status, printing as
// the originals do, 0 when all is well.
func (t *cmatest) createMessage(pd *roce.PD, size, n int) (*roce.MR, int) {
	if size == 0 {
		t.count = 0
	}
	if t.count == 0 {
		return nil, 0
	}
	if size < 0 || size > 1<<30 {
		t.printf("failed message allocation\n")
		t.printf("%s: failed to create messages: %d\n", t.name, -1)
		return nil, -1
	}
	mr, err := pd.RegMR(make([]byte, n), roce.AccessLocalWrite)
	if err != nil {
		t.printf("failed to reg MR\n")
		t.printf("%s: failed to create messages: %d\n", t.name, -1)
		return nil, -1
	}
	return mr, 0
}

// poll waits for the next completion of cq into wc, for poll_cqs: 0, or
// -1 once ctx ends (interrupted), or -ETIMEDOUT, said, after a silence of
// the peer for cmPeerTimeout (silent).
func (t *cmatest) poll(ctx context.Context, cq *roce.CQ, wc []roce.WC) int {
	ok, err := pollOne(ctx, cq, wc, nil, cmPeerTimeout)
	switch {
	case ctx.Err() != nil:
		t.interrupted = true
		return -1
	case err != nil || !ok:
		t.printf("%s\n", silentMsg(t.name))
		t.silent = true
		return -int(syscall.ETIMEDOUT)
	}
	return 0
}
