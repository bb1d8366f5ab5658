//go:build linux

package rdmacm

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

// PeerTimeout is cmPeerTimeout, for the tools (which only read it; tests
// set it with SetPeerTimeout).
func PeerTimeout() time.Duration { return cmPeerTimeout }

// testHookListen, when set, is called once a tool listens: tests start
// the client then. Atomic, since a test may signal from a goroutine of its
// own while another part of it sets the hook.
var testHookListen atomic.Pointer[func()]

// Listening tells the test hook, if any, that a tool listens.
func Listening() {
	if h := testHookListen.Load(); h != nil {
		(*h)()
	}
}

// ExitInterrupted is the status of a tool stopped by SIGINT (the shell's
// 128 + 2 for the C tool killed by it).
const ExitInterrupted = 130

// errPeerSilent is a wait for the peer that timed out.
var errPeerSilent = errors.New("the peer is silent")

// SilentMsg is the line a clone prints when the peer went quiet.
func SilentMsg(tool string) string {
	return fmt.Sprintf("%s: nothing from the peer for %v: giving up (is it still there?)", tool, cmPeerTimeout)
}

// LockedWriter serialises writes to w (rping -P prints from a goroutine
// per connection).
type LockedWriter struct {
	mu sync.Mutex // guards w
	W  io.Writer
}

func (l *LockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(p)
}

// strerror is glibc's text of an errno: Go's, capitalised.
func strerror(errno syscall.Errno) string {
	s := errno.Error()
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		s = string(s[0]-'a'+'A') + s[1:]
	}
	return s
}

// Perror prints what perror(3) prints for what and errno.
func Perror(w io.Writer, what string, errno syscall.Errno) {
	fmt.Fprintf(w, "%s: %s\n", what, strerror(errno))
}

// GAIError is a failed getaddrinfo: its EAI_ code and gai_strerror text.
type GAIError struct {
	Code int
	Msg  string
}

func (e *GAIError) Error() string { return e.Msg }

// getaddrinfo's errors that a look-up here can give.
var (
	eaiNoName  = &GAIError{-2, "Name or service not known"}
	eaiAgain   = &GAIError{-3, "Temporary failure in name resolution"}
	eaiService = &GAIError{-8, "Servname not supported for ai_socktype"}
)

// LookupAddr is getaddrinfo(host)'s first address; numeric only refuses
// names (AI_NUMERICHOST).
func LookupAddr(ctx context.Context, host string, numeric bool) (netip.Addr, *GAIError) {
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

// LookupPort is getaddrinfo's service: a number (its low 16 bits, as
// glibc's htons) or a TCP service name.
func LookupPort(service string) (uint16, *GAIError) {
	if n, err := strconv.ParseUint(service, 10, 64); err == nil {
		return uint16(n), nil
	}
	p, err := net.LookupPort("tcp", service)
	if err != nil {
		return 0, eaiService
	}
	return uint16(p), nil
}

// IfaceError is why no interface fits: the errno the kernel's rdma_cm
// gives for it, and the details.
type IfaceError struct {
	Errno syscall.Errno
	err   error
}

func (e *IfaceError) Error() string { return e.err.Error() }

// Interface names the interface whose device a librdmacm program would
// use, as the kernel's rdma_cm binds an id: ifname if given; else the
// interface holding local (a bound or source address), if it is
// specified; else the interface of the route to peer, if valid; else the
// only interface with an address.
func Interface(ifname string, local, peer netip.Addr) (string, *IfaceError) {
	switch {
	case ifname != "":
		return ifname, nil
	case local.IsValid() && !local.IsUnspecified():
		name, err := interfaceOf(local)
		if err != nil {
			return "", &IfaceError{syscall.EADDRNOTAVAIL, err}
		}
		return name, nil
	case peer.IsValid():
		name, err := device.RouteInterface(peer)
		if err != nil {
			return "", &IfaceError{syscall.ENETUNREACH, err}
		}
		if ifc, err := net.InterfaceByName(name); err == nil && ifc.Flags&net.FlagLoopback != 0 {
			return "", &IfaceError{syscall.ENODEV, fmt.Errorf("%v is an address of this host, which xroce cannot connect to", peer)}
		}
		return name, nil
	}
	name, err := device.DefaultInterface("")
	if err != nil {
		return "", &IfaceError{syscall.ENODEV, err}
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

// Device is an open device and its connection manager.
type Device struct {
	Dev   *roce.Device
	Agent *cm.Agent
}

// Open opens the RoCE device on ifname (see device.OpenNIC) and starts its CM
// agent.
func Open(w io.Writer, cmd, ifname string) (*Device, error) {
	dev, err := device.OpenNIC(w, cmd, ifname, roce.Config{})
	if err != nil {
		return nil, fmt.Errorf("cannot open a RoCE device on %s: %w", ifname, err)
	}
	a, err := cm.Open(dev, cm.AgentConfig{})
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("cannot start the connection manager on %s: %w", ifname, err)
	}
	return &Device{Dev: dev, Agent: a}, nil
}

// Close stops the agent (its last DREPs leave first) and the device.
func (d *Device) Close() {
	d.Agent.Close()
	d.Dev.Close()
}

// Event is the rdma_cm event, and its status, by which librdmacm would
// have reported err of Dial, Accept or ResolveUD: the peer's REJ reason,
// the SIDR_REP's status (the kernel's cma_sidr_rep_handler makes any but
// "valid" UNREACHABLE), -ETIMEDOUT for a peer that never answered, an
// errno otherwise.
func Event(err error) (string, int) {
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

// Errno is the errno a synchronous librdmacm call (rdma_connect,
// rdma_accept of the rdma_create_ep API) sets for err: ECONNREFUSED for a
// REJ, ETIMEDOUT for silence.
func Errno(err error) syscall.Errno {
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

// PostErrno is the errno ibv_post_send or ibv_post_recv returns for err.
func PostErrno(err error) int {
	if errors.Is(err, roce.ErrQueueFull) {
		return int(syscall.ENOMEM)
	}
	return int(syscall.EINVAL)
}

// ResolvePeer is rdma_resolve_addr's half of a connection: the peer's
// Ethernet address within 2000 ms, as the originals ask.
func ResolvePeer(ctx context.Context, dev *roce.Device, peer netip.Addr) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := dev.Resolve(ctx, peer)
	return err
}

// Accept is rdma_accept: req accepted onto qp with p (nil for the
// defaults), waiting at most cmPeerTimeout for the RTU.
func Accept(ctx context.Context, req *cm.Request, qp *roce.QP, p *cm.ConnParam) (*cm.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, cmPeerTimeout)
	defer cancel()
	return req.Accept(ctx, qp, p)
}

// Dial is rdma_connect of qp to dst, waiting at most twice cmPeerTimeout
// for the REP (the REQ is sent again meanwhile).
func (d *Device) Dial(ctx context.Context, dst netip.AddrPort, qp *roce.QP, opts *cm.DialOptions) (*cm.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*cmPeerTimeout)
	defer cancel()
	return d.Agent.Dial(ctx, dst, qp, opts)
}

// Release frees what a connection made, each part if it was made, in the
// order the parts depend on each other: the connection (as
// rdma_destroy_id), the QP, the MRs, the CQs, the PD.
func Release(conn *cm.Conn, qp *roce.QP, mrs []*roce.MR, cqs []*roce.CQ, pd *roce.PD) {
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

// PollOne waits for one completion of cq and puts it in wc. It returns
// false with a nil error when done is closed and the CQ is empty (done
// may be nil), errPeerSilent after timeout without either, ctx's error
// when ctx ends.
func PollOne(ctx context.Context, cq *roce.CQ, wc []roce.WC, done <-chan struct{}, timeout time.Duration) (bool, error) {
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

// CString is the C string at the start of b: up to its first NUL.
func CString(b []byte) []byte {
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

// CmatestOptions are the flags ucmatose and udaddy share.
type CmatestOptions struct {
	Dst, Src    string // -s (client mode), -b
	Numeric     bool   // -f ip or gid: no name look-ups
	Connections int    // -c
	Count       int    // -C
	Size        int    // -S
	TOS         uint8  // -t
	SetTOS      bool   //
	Ifname      string // -d (xroce's)
}

// Set reads op, as both mains do, if it is one of the shared flags, and
// says whether it was.
func (o *CmatestOptions) Set(stderr io.Writer, op base.Option) bool {
	switch op.C {
	case 's':
		o.Dst = op.Arg
	case 'b':
		o.Src = op.Arg
	case 'f':
		switch {
		case HasPrefixFold(op.Arg, "ip"), HasPrefixFold(op.Arg, "gid"):
			o.Numeric = true
		case !HasPrefixFold(op.Arg, "name"):
			fmt.Fprintln(stderr, "Warning: unknown address format")
		}
	case 'c':
		o.Connections = base.Atoi(op.Arg)
	case 'C':
		o.Count = base.Atoi(op.Arg)
	case 'S':
		o.Size = base.Atoi(op.Arg)
	case 't':
		o.SetTOS, o.TOS = true, base.Strtoul8(op.Arg)
	case 'd':
		o.Ifname = op.Arg
	default:
		return false
	}
	return true
}

// HasPrefixFold is strncasecmp(prefix, s, len(prefix)) == 0.
func HasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// Cmatest is what a run of ucmatose or udaddy keeps besides its options
// and its nodes, as their struct cmatest.
type Cmatest struct {
	Name           string // the originals' prefix of their lines: "cmatose", "udaddy"
	Stdout, Stderr io.Writer
	Count          int // message_count, which a message size of 0 sets to 0
	CM             *Device
	ConnectsLeft   int
	Interrupted    bool
	Silent         bool // a wait for the peer timed out: wait for it no more
}

// CmatestAddr is what start looked up: -b's address (local), -s's (peer)
// and the port; or the failure that the server or the client reports
// once started, of a look-up (gerr) or of an address that no interface
// has (ierr).
type CmatestAddr struct {
	Local, Peer netip.Addr
	Port        uint16
	gerr        *GAIError
	ierr        *IfaceError
}

func (t *Cmatest) Printf(format string, a ...any) { fmt.Fprintf(t.Stdout, format, a...) }

// Start is what ucmatose and udaddy (cmd, the xroce command) do before
// they print anything: -c checked (the nodes' calloc refuses a negative
// count), -b's and -s's addresses and the port of service looked up, then
// the device opened, as librdmacm's: -d's, or that of -b, or of the route
// to -s, or the only one. A failed look-up or an address that no
// interface has is left in a for the server or the client to report; ok
// is false when the run ends here, with status 1, after the lines.
func (t *Cmatest) Start(ctx context.Context, cmd string, o *CmatestOptions, service string) (a CmatestAddr, ok bool) {
	if o.Connections < 0 {
		t.Printf("%s: unable to allocate memory for test nodes\n", t.Name)
		return a, false
	}
	t.ConnectsLeft = o.Connections
	if o.Src != "" {
		a.Local, a.gerr = LookupAddr(ctx, o.Src, o.Numeric)
	}
	if o.Dst != "" && a.gerr == nil {
		a.Peer, a.gerr = LookupAddr(ctx, o.Dst, o.Numeric)
	}
	if a.gerr == nil {
		a.Port, a.gerr = LookupPort(service)
	}
	var ifname string
	if a.gerr == nil {
		ifname, a.ierr = Interface(o.Ifname, a.Local, a.Peer)
	}
	if a.gerr != nil || a.ierr != nil && a.ierr.Errno != syscall.ENODEV {
		return a, true
	}
	var err error
	switch {
	case a.ierr != nil && o.Dst == "":
		err = fmt.Errorf("%v: name one with -d INTERFACE", a.ierr)
	case a.ierr != nil:
		err = a.ierr
	default:
		t.CM, err = Open(t.Stderr, t.Name, ifname)
	}
	if err != nil {
		fmt.Fprintf(t.Stderr, "%s: %v\n", cmd, err)
		fmt.Fprintln(t.Stderr, "No RDMA devices were detected")
		return a, false
	}
	return a, true
}

// Close closes the device, if start opened it.
func (t *Cmatest) Close() {
	if t.CM != nil {
		t.CM.Close()
	}
}

// End is the end of main: the status of an interrupted run, or ret after
// printing it.
func (t *Cmatest) End(ret int) int {
	if t.Interrupted {
		return ExitInterrupted
	}
	t.Printf("test complete\n")
	t.Printf("return status %d\n", ret)
	return ret
}

// AllocNodes is alloc_nodes: n nodes, nothing made in them yet.
func AllocNodes[N any](n int) []*N {
	nodes := make([]*N, n)
	for i := range nodes {
		nodes[i] = new(N)
	}
	return nodes
}

// Listen is run_server's get_rdma_addr, rdma_bind_addr and rdma_listen
// on -b's address in port space ps: the listener, or the status of a
// failure after its lines.
func (t *Cmatest) Listen(a CmatestAddr, ps mad.PortSpace) (*cm.Listener, int) {
	if a.gerr != nil {
		t.Printf("%s: getrdmaaddr error: %s\n", t.Name, a.gerr.Msg)
		return nil, a.gerr.Code
	}
	if a.ierr != nil {
		Perror(t.Stderr, t.Name+": bind address failed", a.ierr.Errno)
		return nil, -1
	}
	l, err := t.CM.Agent.Listen(netip.AddrPortFrom(a.Local, a.Port), &cm.ListenOptions{PortSpace: ps})
	if err != nil {
		Perror(t.Stderr, t.Name+": bind address failed", syscall.EADDRINUSE)
		return nil, -1
	}
	Listening()
	return l, 0
}

// Connecting is run_client's get_rdma_addr and the failure of its
// rdma_resolve_addr calls, with the line between them: 0 to go on, or the
// status after the failure's line.
func (t *Cmatest) Connecting(a CmatestAddr) int {
	if a.gerr != nil {
		t.Printf("%s: getaddrinfo error: %s\n", t.Name, a.gerr.Msg)
		return a.gerr.Code
	}
	t.Printf("%s: connecting\n", t.Name)
	if a.ierr != nil {
		Perror(t.Stderr, t.Name+": failure getting addr", a.ierr.Errno)
		return -1
	}
	return 0
}

// ErrAddr marks a node whose address did not resolve.
var ErrAddr = errors.New("address resolution failed")

// AddrError prints the event of a node whose address did not resolve
// (ErrAddr), and returns its status.
func (t *Cmatest) AddrError() int {
	t.Printf("%s: event: RDMA_CM_EVENT_ADDR_ERROR, error: %d\n", t.Name, -int(syscall.ETIMEDOUT))
	return -int(syscall.ETIMEDOUT)
}

// EventError prints the rdma_cm event by which a connection or a SIDR
// resolution failed with err, and returns its status.
func (t *Cmatest) EventError(err error) int {
	name, st := Event(err)
	t.Printf("%s: event: %s, error: %d\n", t.Name, name, st)
	return st
}

// CreateMessage is create_message for messages of size bytes (-S): unless
// message_count is 0, which a size of 0 makes it, a buffer of n bytes
// registered on pd for local writes. It returns the status, printing as
// the originals do, 0 when all is well.
func (t *Cmatest) CreateMessage(pd *roce.PD, size, n int) (*roce.MR, int) {
	if size == 0 {
		t.Count = 0
	}
	if t.Count == 0 {
		return nil, 0
	}
	if size < 0 || size > 1<<30 {
		t.Printf("failed message allocation\n")
		t.Printf("%s: failed to create messages: %d\n", t.Name, -1)
		return nil, -1
	}
	mr, err := pd.RegMR(make([]byte, n), roce.AccessLocalWrite)
	if err != nil {
		t.Printf("failed to reg MR\n")
		t.Printf("%s: failed to create messages: %d\n", t.Name, -1)
		return nil, -1
	}
	return mr, 0
}

// Poll waits for the next completion of cq into wc, for poll_cqs: 0, or
// -1 once ctx ends (interrupted), or -ETIMEDOUT, said, after a silence of
// the peer for cmPeerTimeout (silent).
func (t *Cmatest) Poll(ctx context.Context, cq *roce.CQ, wc []roce.WC) int {
	ok, err := PollOne(ctx, cq, wc, nil, cmPeerTimeout)
	switch {
	case ctx.Err() != nil:
		t.Interrupted = true
		return -1
	case err != nil || !ok:
		t.Printf("%s\n", SilentMsg(t.Name))
		t.Silent = true
		return -int(syscall.ETIMEDOUT)
	}
	return 0
}
