//go:build linux

package lab

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/seqdiag"
	"github.com/xroce/xroce/cmd/xroce/internal/statcount"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/internal/pcaptap"
	"github.com/xroce/xroce/internal/statsock"
	"github.com/xroce/xroce/roce"
	"github.com/xroce/xroce/xdp"
)

// labHost is one side of the lab: a namespace with its XDP program,
// AF_XDP sockets and xroce device.
type labHost struct {
	name   string // "A" or "B"
	h      *netns.Host
	prog   *bpf.Program
	xd     *xdp.Device
	dev    *roce.Device
	cm     *cm.Agent // its connection manager (QP 1)
	cmConn *cm.Conn  // the tour's RC connection, made through the CM
	pd     *roce.PD
	attach string // XDP attach mode
	mode   string // AF_XDP bind mode
}

// labQP is a queue pair of the lab with its CQ, buffer and the counters
// the lab keeps for it (roce.QP has none to read yet).
type labQP struct {
	name string // "rc", "uc", "ud", "rc-loss", "rc-lat"
	host *labHost
	qp   *roce.QP
	cq   *roce.CQ
	buf  []byte
	mr   *roce.MR
	peer *labQP

	posted, completed, failed, bytes atomic.Uint64
}

// labRun is one run of the lab.
type labRun struct {
	ctx  context.Context
	o    labOptions
	e    *base.Env
	out  io.Writer // stdout, io.Discard with --quiet
	tty  bool      // stderr is a terminal: progress lines
	pair *netns.Pair
	a, b *labHost
	file *os.File
	rec  *pcaptap.Recorder
	stat *statsock.Server
	qps  []*labQP
	rc   [2]*labQP // the RC pair of the tour and the bandwidth measurement
	lat  [2]*labQP // the RC pair of the latency measurement (see measure)
	diag *seqdiag.Diagram

	started time.Time
	phase   atomic.Value // string

	// kmu guards kept and keep: copies of recorded frames for the
	// sequence diagrams.
	kmu  sync.Mutex
	kept []seqdiag.Frame
	keep int

	drawSteps        bool // tourStep draws the frames kept
	checks, failures int
	res              labResults
}

// labResults are the figures of the results table.
type labResults struct {
	tourOps                            int
	lossDone                           bool
	lossDrops, lossRetrans, lossNaks   uint64
	lossTime                           time.Duration
	rdmaBytes, tcpBytes                uint64
	rdmaTime, tcpTime                  time.Duration
	rdmaLat, tcpLat                    []time.Duration // half round trips, sorted
	rdmaLatIters, tcpLatIters          int
	measured, rdmaMeasured, tcpLatDone bool
}

func lab(ctx context.Context, e *base.Env, o labOptions) (err error) {
	r := &labRun{ctx: ctx, o: o, e: e, out: e.Stdout, started: time.Now()}
	if o.quiet {
		r.out = io.Discard
	}
	if f, ok := e.Stderr.(*os.File); ok && !o.quiet {
		_, terr := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		r.tty = terr == nil
	}
	r.phase.Store("setup")
	defer func() {
		cerr := r.close()
		switch {
		case ctx.Err() != nil && err != nil && cerr == nil:
			err = errors.New("lab: interrupted (namespaces removed)")
		case ctx.Err() != nil && err != nil:
			err = fmt.Errorf("lab: interrupted; %w", cerr)
		case err == nil:
			err = cerr
		}
	}()
	if err := r.setup(); err != nil {
		return err
	}
	if err := r.tour(); err != nil {
		return err
	}
	if o.loss > 0 {
		if err := r.lossPhase(); err != nil {
			return err
		}
	}
	if o.duration > 0 {
		if err := r.measure(); err != nil {
			return err
		}
	}
	r.phase.Store("done")
	r.report()
	if r.failures > 0 {
		return fmt.Errorf("lab: %d of %d checks failed", r.failures, r.checks)
	}
	return nil
}

// labNames names the lab's hosts by their addresses, for lab --html.
func labNames() map[netip.Addr]string {
	a := netns.DefaultPrefix.Addr().Next()
	return map[netip.Addr]string{a: "A", a.Next(): "B"}
}

// labTestHook, when set by a test, is called as the lab enters each phase;
// an error it returns ends the lab (and it may panic).
var labTestHook func(phase string) error

// enter records the phase the lab is in, for xroce stat.
func (r *labRun) enter(phase string) error {
	r.phase.Store(phase)
	if labTestHook != nil {
		return labTestHook(phase)
	}
	return nil
}

// setup makes the namespaces, the devices and the queue pairs.
func (r *labRun) setup() error {
	var w io.Writer = io.Discard
	if r.o.pcap != "" {
		f, err := os.Create(r.o.pcap)
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		r.file, w = f, f
	}
	rec, err := pcaptap.New(w, pcaptap.Config{OnFrame: r.onFrame})
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	r.rec = rec
	if gone, err := netns.Sweep(); err == nil && len(gone) > 0 {
		fmt.Fprintf(r.out, "removed %d namespaces left by xroce processes that died: %v\n", len(gone), gone)
	}
	r.pair, err = netns.New(netns.Config{MTU: r.o.mtu, Queues: r.o.queues})
	if errors.Is(err, netns.ErrPermission) {
		return fmt.Errorf("lab: make namespaces: %w (run it as root: sudo xroce lab)", err)
	}
	if err != nil {
		return fmt.Errorf("lab: make namespaces: %w", err)
	}
	r.a = &labHost{name: "A", h: r.pair.A}
	r.b = &labHost{name: "B", h: r.pair.B}
	for _, h := range []*labHost{r.a, r.b} {
		if err := r.open(h); err != nil {
			return fmt.Errorf("lab: host %s: %w", h.name, err)
		}
	}
	tour := 0
	for _, n := range r.o.sizes {
		tour = max(tour, n)
	}
	rcSize := max(tour, r.o.size, 4096)
	mtu := r.a.dev.Info().ActiveMTU.Bytes()
	var err2 error
	mk := func(h *labHost, name string, typ roce.QPType, size int) *labQP {
		if err2 != nil {
			return nil
		}
		var q *labQP
		q, err2 = r.newQP(h, name, typ, size)
		return q
	}
	rcA, rcB := mk(r.a, "rc", roce.RC, rcSize), mk(r.b, "rc", roce.RC, rcSize)
	ucA, ucB := mk(r.a, "uc", roce.UC, max(tour, 64)), mk(r.b, "uc", roce.UC, max(tour, 64))
	udA, udB := mk(r.a, "ud", roce.UD, mtu+40), mk(r.b, "ud", roce.UD, mtu+40)
	lossA, lossB := mk(r.a, "rc-loss", roce.RC, lossBufSize), mk(r.b, "rc-loss", roce.RC, lossBufSize)
	latA, latB := mk(r.a, "rc-lat", roce.RC, latBufSize), mk(r.b, "rc-lat", roce.RC, latBufSize)
	if err2 != nil {
		return fmt.Errorf("lab: %w", err2)
	}
	r.rc = [2]*labQP{rcA, rcB}
	r.lat = [2]*labQP{latA, latB}
	// The RC pair connects through RDMA CM in the tour; the others now.
	for _, p := range [][2]*labQP{{ucA, ucB}, {udA, udB}, {lossA, lossB}, {latA, latB}} {
		opts := roce.ConnectOptions{}
		if p[0].name == "rc-loss" {
			opts.Timeout = 10 // 4.2 ms: recover quickly from a lost tail
		}
		if err := r.connect(p[0], p[1], opts); err != nil {
			return fmt.Errorf("lab: connect %s: %w", p[0].name, err)
		}
	}
	if r.o.statDir != "" {
		s, err := statsock.Listen(r.o.statDir, r.snapshot)
		if err != nil {
			fmt.Fprintf(r.e.Stderr, "xroce lab: no counters for xroce stat: %v\n", err)
		} else {
			r.stat = s
		}
	}
	r.printSetup()
	return nil
}

// lossBufSize is the buffer of each loss QP: 1 MiB for WRITEs and READs,
// 64 KiB for SENDs, 4 KiB for atomics.
const lossBufSize = 1<<20 + 64<<10 + 4<<10

// open starts host h's device: its own XDP program (for loss injection),
// AF_XDP sockets on every queue, each wrapped to record what it sends, and
// an xroce device over them.
func (r *labRun) open(h *labHost) error {
	// The multi-buffer program is needed when a frame does not fit in a
	// 4096-byte UMEM chunk after the kernel's 256-byte headroom.
	frags := r.o.mtu+18 > 4096-256
	err := h.h.Do(func() error {
		prog, err := bpf.Load(bpf.Options{Frags: frags, MaxQueues: max(bpf.DefaultMaxQueues, r.o.queues)})
		if err != nil {
			return err
		}
		h.prog = prog
		mode, err := prog.Attach(h.h.Index)
		if err != nil {
			return err
		}
		h.attach = mode.String()
		qs := make([]int, r.o.queues)
		for i := range qs {
			qs[i] = i
		}
		h.xd, err = xdp.Open(h.h.Ifname, xdp.Config{Queues: qs, Steering: prog})
		return err
	})
	if err != nil {
		return err
	}
	links := pcaptap.WrapAll(h.xd.Links(), r.rec, h.name, pcaptap.TX)
	h.mode = links[0].Info().Mode
	peer := h.h.Peer
	h.dev, err = roce.NewDevice(links, roce.Config{
		Addrs:     []netip.Addr{h.h.IP},
		Neighbors: map[netip.Addr]net.HardwareAddr{peer.IP: peer.MAC},
		// The tour's pictures name the QPs: the same numbers every run.
		SequentialQPN: true,
	})
	if err != nil {
		return err
	}
	if h.cm, err = cm.Open(h.dev, cm.AgentConfig{}); err != nil {
		return err
	}
	h.pd, err = h.dev.AllocPD()
	return err
}

func (r *labRun) newQP(h *labHost, name string, typ roce.QPType, size int) (*labQP, error) {
	cq, err := h.dev.CreateCQ(4096)
	if err != nil {
		return nil, err
	}
	qp, err := h.pd.CreateQP(roce.QPConfig{Type: typ, SendCQ: cq, RecvCQ: cq, MaxSendWR: 256, MaxRecvWR: 256})
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	mr, err := h.pd.RegMR(buf, roce.AccessLocalWrite|roce.AccessRemoteWrite|roce.AccessRemoteRead|roce.AccessRemoteAtomic)
	if err != nil {
		return nil, err
	}
	q := &labQP{name: name, host: h, qp: qp, cq: cq, buf: buf, mr: mr}
	r.qps = append(r.qps, q)
	return q, nil
}

// connect brings a and b to RTS towards each other, with random first PSNs.
func (r *labRun) connect(a, b *labQP, opts roce.ConnectOptions) error {
	ea, err := a.qp.LocalEndpoint(rand.Uint32(), opts)
	if err != nil {
		return err
	}
	eb, err := b.qp.LocalEndpoint(rand.Uint32(), opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	if err := a.qp.Connect(ctx, ea, eb, opts); err != nil {
		return err
	}
	if err := b.qp.Connect(ctx, eb, ea, opts); err != nil {
		return err
	}
	a.peer, b.peer = b, a
	return nil
}

// close takes everything down, in the reverse order of setup.
func (r *labRun) close() error {
	var errs []error
	if r.stat != nil {
		errs = append(errs, r.stat.Close())
	}
	for _, h := range []*labHost{r.a, r.b} {
		if h == nil {
			continue
		}
		if h.cmConn != nil {
			h.cmConn.Close()
		}
		if h.cm != nil {
			errs = append(errs, h.cm.Close())
		}
		if h.dev != nil {
			errs = append(errs, h.dev.Close())
		}
		if h.xd != nil {
			errs = append(errs, h.xd.Close())
		}
		if h.prog != nil {
			errs = append(errs, h.prog.Close())
		}
	}
	if r.pair != nil {
		errs = append(errs, r.pair.Close())
	}
	if r.rec != nil {
		if err := r.rec.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", r.o.pcap, err))
		}
	}
	if r.file != nil {
		errs = append(errs, r.file.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lab: clean up: %w", err)
	}
	return nil
}

// onFrame keeps copies of recorded frames for the diagrams (called by the
// recorder under its lock).
func (r *labRun) onFrame(f pcaptap.Frame) {
	r.kmu.Lock()
	if r.keep > 0 {
		r.keep--
		r.kept = append(r.kept, seqdiag.Frame{Time: f.Time, Data: bytes.Clone(f.Data)})
	}
	r.kmu.Unlock()
}

// keepFrames sets how many of the next recorded frames to keep.
func (r *labRun) keepFrames(n int) {
	r.kmu.Lock()
	r.keep = n
	r.kmu.Unlock()
}

// takeKept returns the frames kept so far and forgets them.
func (r *labRun) takeKept() []seqdiag.Frame {
	r.kmu.Lock()
	defer r.kmu.Unlock()
	k := r.kept
	r.kept = nil
	return k
}

// progress shows how a long phase goes, on a terminal only.
func (r *labRun) progress(format string, args ...any) {
	if r.tty {
		fmt.Fprintf(r.e.Stderr, "\r  "+format+"\033[K", args...)
	}
}

// progressDone clears the progress line.
func (r *labRun) progressDone() {
	if r.tty {
		fmt.Fprint(r.e.Stderr, "\r\033[K")
	}
}

func (r *labRun) printSetup() {
	w := r.out
	fmt.Fprintln(w, "xroce lab: RoCE v2 between two network namespaces over a veth pair, AF_XDP on both ends")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  namespaces  %s (A) and %s (B), veth MTU %d, %s\n", r.a.h.Name, r.b.h.Name, r.o.mtu, base.Plural(r.o.queues, "queue"))
	for _, h := range []*labHost{r.a, r.b} {
		i := h.dev.Info()
		fmt.Fprintf(w, "  host %s      %s %s, AF_XDP %s mode, XDP %s mode, %s, RoCE MTU %d\n",
			h.name, h.h.IP, h.h.MAC, h.mode, h.attach, base.Plural(i.Queues, "worker"), i.ActiveMTU.Bytes())
	}
	fmt.Fprint(w, "  QPs        ")
	for i := 0; i+1 < len(r.qps); i += 2 {
		a, b := r.qps[i], r.qps[i+1]
		fmt.Fprintf(w, " %s %#x<->%#x", a.name, a.qp.QPN(), b.qp.QPN())
	}
	fmt.Fprintln(w)
	if r.o.pcap != "" {
		fmt.Fprintf(w, "  pcap        %s: every frame A and B send, as on the wire\n", r.o.pcap)
	}
	if r.stat != nil {
		fmt.Fprintf(w, "  counters    %s: xroce stat -p %d\n", r.stat.Path(), os.Getpid())
	}
}

// fence orders the lab's accesses to q's buffer with q's worker, which
// touches the buffer under its lock: a one-sided operation (WRITE, READ,
// atomic) gives the remote side no completion to synchronize on, so the
// lab takes that lock after preparing the remote buffer and before
// checking it.
func (q *labQP) fence() { q.qp.State() }

// post posts wr on q and counts it.
func (q *labQP) post(wr *roce.SendWR) error {
	if err := q.qp.PostSend(wr); err != nil {
		return fmt.Errorf("%s %s: post: %w", q.host.name, q.name, err)
	}
	q.posted.Add(1)
	return nil
}

// recv posts a receive of n bytes at off of q's buffer.
func (q *labQP) recv(id uint64, off, n int) error {
	wr := &roce.RecvWR{ID: id}
	if n > 0 {
		wr.SGL = []roce.SGE{q.mr.SGE(off, n)}
	}
	if err := q.qp.PostRecv(wr); err != nil {
		return fmt.Errorf("%s %s: post receive: %w", q.host.name, q.name, err)
	}
	return nil
}

// wait returns the next completion of q's CQ, within 10 s.
func (r *labRun) wait(q *labQP) (roce.WC, error) {
	wc, err := r.waitOn(r.ctx, q)
	if err != nil && r.ctx.Err() != nil {
		return wc, r.ctx.Err()
	}
	return wc, err
}

// sendRecv posts a receive of recvLen bytes on b, then wr on a, and waits
// for a's send completion and b's receive completion, which it returns.
func (r *labRun) sendRecv(a, b *labQP, wr *roce.SendWR, recvLen int) (roce.WC, error) {
	if err := b.recv(1, 0, recvLen); err != nil {
		return roce.WC{}, err
	}
	if err := a.post(wr); err != nil {
		return roce.WC{}, err
	}
	if _, err := r.expect(a, roce.WCSend); err != nil {
		return roce.WC{}, err
	}
	return r.expect(b, roce.WCRecv)
}

// expect waits for a successful completion of opcode op on q.
func (r *labRun) expect(q *labQP, op roce.WCOpcode) (roce.WC, error) {
	wc, err := r.wait(q)
	if err != nil {
		return wc, err
	}
	if wc.Status != roce.WCSuccess || wc.Opcode != op {
		return wc, fmt.Errorf("%s %s: completion %v %v, want %v success", q.host.name, q.name, wc.Opcode, wc.Status, op)
	}
	return wc, nil
}

// fillRandom fills b with bytes from a generator seeded with seed.
func fillRandom(b []byte, seed uint64) {
	g := rand.New(rand.NewPCG(seed, 0x78726f6365))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], g.Uint64())
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(g.Uint32())
	}
}

// sameBytes checks got against want.
func sameBytes(what string, got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Errorf("%s: %d of %d bytes, first difference at byte %d", what, len(got), len(want), i)
}

// tourStep runs one checked operation, prints its result line and the
// frames it sent (while the trace lasts).
func (r *labRun) tourStep(title string, fn func() (string, error)) error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	r.checks++
	r.res.tourOps++
	before := r.rec.Stats().Frames
	detail, err := fn()
	packets := r.rec.Stats().Frames - before
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	status := "ok  "
	if err != nil {
		r.failures++
		status, detail = "FAIL", err.Error()
	}
	r.progressDone()
	plural := "s"
	if packets == 1 {
		plural = " "
	}
	fmt.Fprintf(r.out, "  %s %-28s %4d packet%s  %s\n", status, title, packets, plural, detail)
	if r.drawSteps {
		for _, f := range r.takeKept() {
			r.diag.Frame(f)
			if r.diag.Drawn == r.o.trace {
				fmt.Fprintf(r.out, "  %9s  (the trace ends here: --trace %d)\n", "", r.o.trace)
			}
		}
	}
	return nil
}

// tour runs every operation once and checks it.
func (r *labRun) tour() error {
	if err := r.enter("tour"); err != nil {
		return err
	}
	r.rec.Enable(0)
	r.keepFrames(r.o.trace)
	r.drawSteps = true
	defer func() { r.drawSteps = false }()
	w := r.out
	fmt.Fprintln(w)
	fmt.Fprintln(w, "tour: each operation once, checked")
	if r.o.trace > 0 {
		fmt.Fprintf(w, "      (the first %d packets drawn: A's on arrows to the right, B's to the left; A = AckReq)\n", r.o.trace)
	}
	r.diag = seqdiag.New(w, r.a.h.IP, r.b.h.IP)
	if r.o.trace > 0 {
		r.diag.Header(r.a.h.IP.String(), r.b.h.IP.String())
	}
	a, b := r.rc[0], r.rc[1]
	if err := r.cmConnect(a, b); err != nil {
		return err
	}
	for i, n := range r.o.sizes {
		if err := r.rcOps(a, b, n); err != nil {
			return err
		}
		if i == 0 {
			if err := r.atomics(a, b); err != nil {
				return err
			}
		}
	}
	uc := r.qpsNamed("uc")
	for _, n := range r.o.sizes {
		if err := r.ucOps(uc[0], uc[1], n); err != nil {
			return err
		}
	}
	ud := r.qpsNamed("ud")
	mtu := r.a.dev.Info().ActiveMTU.Bytes()
	done := false
	for _, n := range r.o.sizes {
		if n <= mtu {
			done = true
			if err := r.udSend(ud[0], ud[1], n); err != nil {
				return err
			}
		}
	}
	if !done {
		if err := r.udSend(ud[0], ud[1], mtu); err != nil {
			return err
		}
	}
	r.keepFrames(0)
	r.takeKept()
	return nil
}

// labCMPort is the rdma_cm port the tour's RC connection is made on.
const labCMPort = 7471

// cmConnect connects the tour's RC pair through RDMA CM, as rdma_cm
// programs connect: B listens, A dials; the REQ, REP and RTU are the
// tour's first packets.
func (r *labRun) cmConnect(a, b *labQP) error {
	var failed error
	err := r.tourStep("RC connect (RDMA CM)", func() (string, error) {
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		defer cancel()
		l, err := r.b.cm.Listen(netip.AddrPortFrom(r.b.h.IP, labCMPort), nil)
		if err != nil {
			failed = err
			return "", err
		}
		defer l.Close()
		// The tour's READs and atomics need responder resources; the RNR
		// timer is 12 (0.64 ms) rather than the kernel's 0 (655 ms).
		param := &cm.ConnParam{ResponderResources: 16, InitiatorDepth: 16, RetryCount: 7, RNRRetryCount: 7, MinRNRTimer: 12}
		type accepted struct {
			c   *cm.Conn
			err error
		}
		ch := make(chan accepted, 1)
		go func() {
			req, err := l.Accept(ctx)
			if err != nil {
				ch <- accepted{err: err}
				return
			}
			c, err := req.Accept(ctx, b.qp, param)
			ch <- accepted{c, err}
		}()
		c, err := r.a.cm.Dial(ctx, netip.AddrPortFrom(r.b.h.IP, labCMPort), a.qp, &cm.DialOptions{Param: param})
		acc := <-ch
		if err = errors.Join(err, acc.err); err != nil {
			failed = err
			return "", err
		}
		r.a.cmConn, r.b.cmConn = c, acc.c
		a.peer, b.peer = b, a
		return fmt.Sprintf("QP %#x to %#x: REQ, REP, RTU on QP 1", a.qp.QPN(), b.qp.QPN()), nil
	})
	return errors.Join(err, failed)
}

func (r *labRun) qpsNamed(name string) [2]*labQP {
	var out [2]*labQP
	for _, q := range r.qps {
		if q.name == name {
			if q.host == r.a {
				out[0] = q
			} else {
				out[1] = q
			}
		}
	}
	return out
}

// rcOps checks SEND, SEND_WITH_IMM, WRITE, WRITE_WITH_IMM and READ of n
// bytes from a to b.
func (r *labRun) rcOps(a, b *labQP, n int) error {
	size := base.ByteSize(n)
	for _, op := range []roce.WROpcode{roce.WRSend, roce.WRSendWithImm} {
		name := "SEND"
		if op == roce.WRSendWithImm {
			name = "SEND_WITH_IMM"
		}
		err := r.tourStep(fmt.Sprintf("RC %s %s", name, size), func() (string, error) {
			fillRandom(a.buf[:n], uint64(n)<<8|uint64(op))
			clear(b.buf[:n])
			wc, err := r.sendRecv(a, b, &roce.SendWR{ID: 2, Opcode: op, Flags: roce.SendSignaled, Imm: 0xc0ffee, SGL: []roce.SGE{a.mr.SGE(0, n)}}, n)
			if err != nil {
				return "", err
			}
			if int(wc.ByteLen) != n {
				return "", fmt.Errorf("host B received %d bytes, want %d", wc.ByteLen, n)
			}
			imm := wc.Flags&roce.WCWithImm != 0
			if imm != (op == roce.WRSendWithImm) || imm && wc.Imm != 0xc0ffee {
				return "", fmt.Errorf("host B's completion: imm %v %#x, want %v 0xc0ffee", imm, wc.Imm, op == roce.WRSendWithImm)
			}
			if err := sameBytes("B's buffer", b.buf[:n], a.buf[:n]); err != nil {
				return "", err
			}
			if imm {
				return fmt.Sprintf("B received %d bytes, byte-exact, imm 0x%x", n, wc.Imm), nil
			}
			return fmt.Sprintf("B received %d bytes, byte-exact", n), nil
		})
		if err != nil {
			return err
		}
	}
	for _, op := range []roce.WROpcode{roce.WRRDMAWrite, roce.WRRDMAWriteWithImm} {
		name := "WRITE"
		if op == roce.WRRDMAWriteWithImm {
			name = "WRITE_WITH_IMM"
		}
		err := r.tourStep(fmt.Sprintf("RC %s %s", name, size), func() (string, error) {
			fillRandom(a.buf[:n], uint64(n)<<8|uint64(op))
			clear(b.buf[:n])
			b.fence()
			if op == roce.WRRDMAWriteWithImm {
				if err := b.recv(3, 0, 0); err != nil {
					return "", err
				}
			}
			if err := a.post(&roce.SendWR{ID: 4, Opcode: op, Flags: roce.SendSignaled, Imm: 0xbeef, SGL: []roce.SGE{a.mr.SGE(0, n)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
				return "", err
			}
			if _, err := r.expect(a, roce.WCRDMAWrite); err != nil {
				return "", err
			}
			detail := fmt.Sprintf("B's memory holds the %d bytes, byte-exact", n)
			if op == roce.WRRDMAWriteWithImm {
				wc, err := r.expect(b, roce.WCRecvRDMAWithImm)
				if err != nil {
					return "", err
				}
				if wc.Imm != 0xbeef || wc.Flags&roce.WCWithImm == 0 {
					return "", fmt.Errorf("host B's completion: imm %#x, want 0xbeef", wc.Imm)
				}
				detail += ", B got imm 0xbeef"
			}
			b.fence()
			return detail, sameBytes("B's buffer", b.buf[:n], a.buf[:n])
		})
		if err != nil {
			return err
		}
	}
	return r.tourStep(fmt.Sprintf("RC READ %s", size), func() (string, error) {
		fillRandom(b.buf[:n], uint64(n)<<8|0xee)
		b.fence()
		clear(a.buf[:n])
		if err := a.post(&roce.SendWR{ID: 5, Opcode: roce.WRRDMARead, Flags: roce.SendSignaled, SGL: []roce.SGE{a.mr.SGE(0, n)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			return "", err
		}
		wc, err := r.expect(a, roce.WCRDMARead)
		if err != nil {
			return "", err
		}
		if int(wc.ByteLen) != n {
			return "", fmt.Errorf("read %d bytes, want %d", wc.ByteLen, n)
		}
		return fmt.Sprintf("A read %d bytes of B's memory, byte-exact", n), sameBytes("A's buffer", a.buf[:n], b.buf[:n])
	})
}

// atomics checks FETCH_ADD and CMP_SWAP (one that swaps, one that does not)
// on an 8-byte word of b's memory.
func (r *labRun) atomics(a, b *labQP) error {
	binary.LittleEndian.PutUint64(b.buf[8:], 40)
	b.fence()
	type atomicCase struct {
		title          string
		wr             roce.SendWR
		op             roce.WCOpcode
		orig, after    uint64
		detailTemplate string
	}
	cases := []atomicCase{
		{"RC FETCH_ADD +2", roce.SendWR{Opcode: roce.WRAtomicFetchAdd, CompareAdd: 2}, roce.WCFetchAdd, 40, 42,
			"A got the old value %d, B's word is now %d"},
		{"RC CMP_SWAP 42->7", roce.SendWR{Opcode: roce.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 7}, roce.WCCompSwap, 42, 7,
			"A got %d (equal: swapped), B's word is now %d"},
		{"RC CMP_SWAP 42->9", roce.SendWR{Opcode: roce.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 9}, roce.WCCompSwap, 7, 7,
			"A got %d (not equal: kept), B's word is still %d"},
	}
	for _, c := range cases {
		err := r.tourStep(c.title, func() (string, error) {
			clear(a.buf[:8])
			wr := c.wr
			wr.ID, wr.Flags, wr.SGL = 6, roce.SendSignaled, []roce.SGE{a.mr.SGE(0, 8)}
			wr.RemoteAddr, wr.RKey = b.mr.Addr()+8, b.mr.RKey()
			if err := a.post(&wr); err != nil {
				return "", err
			}
			if _, err := r.expect(a, c.op); err != nil {
				return "", err
			}
			b.fence()
			orig, now := binary.LittleEndian.Uint64(a.buf), binary.LittleEndian.Uint64(b.buf[8:])
			if orig != c.orig || now != c.after {
				return "", fmt.Errorf("host A got %d, B's word is %d; want %d and %d", orig, now, c.orig, c.after)
			}
			return fmt.Sprintf(c.detailTemplate, orig, now), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ucOps checks UC SEND and WRITE of n bytes: no ACKs. The WRITE is
// followed by a SEND on the same QP, whose arrival at B says the WRITE
// (placed in order before it) has landed.
func (r *labRun) ucOps(a, b *labQP, n int) error {
	size := base.ByteSize(n)
	err := r.tourStep("UC SEND "+size, func() (string, error) {
		fillRandom(a.buf[:n], uint64(n)<<8|0x55)
		clear(b.buf[:n])
		wc, err := r.sendRecv(a, b, &roce.SendWR{ID: 1, Opcode: roce.WRSend, Flags: roce.SendSignaled, SGL: []roce.SGE{a.mr.SGE(0, n)}}, n)
		if err != nil {
			return "", err
		}
		if int(wc.ByteLen) != n {
			return "", fmt.Errorf("host B received %d bytes, want %d", wc.ByteLen, n)
		}
		return fmt.Sprintf("B received %d bytes, byte-exact (no ACK on UC)", n), sameBytes("B's buffer", b.buf[:n], a.buf[:n])
	})
	if err != nil {
		return err
	}
	return r.tourStep("UC WRITE "+size, func() (string, error) {
		fillRandom(a.buf[:n], uint64(n)<<8|0x56)
		clear(b.buf[:n])
		if err := b.recv(2, 0, 0); err != nil {
			return "", err
		}
		if err := a.post(&roce.SendWR{ID: 2, Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled, SGL: []roce.SGE{a.mr.SGE(0, n)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			return "", err
		}
		if err := a.post(&roce.SendWR{ID: 3, Opcode: roce.WRSend, Flags: roce.SendSignaled}); err != nil {
			return "", err
		}
		for range 2 {
			if _, err := r.wait(a); err != nil {
				return "", err
			}
		}
		if _, err := r.expect(b, roce.WCRecv); err != nil {
			return "", err
		}
		return fmt.Sprintf("B's memory holds the %d bytes, byte-exact (seen after a 0-byte SEND)", n),
			sameBytes("B's buffer", b.buf[:n], a.buf[:n])
	})
}

// udSend checks a UD datagram of n bytes: it arrives after a 40-byte GRH
// area, with the sender's QPN.
func (r *labRun) udSend(a, b *labQP, n int) error {
	return r.tourStep("UD SEND "+base.ByteSize(n), func() (string, error) {
		av, err := a.host.dev.Resolve(r.ctx, b.host.h.IP)
		if err != nil {
			return "", err
		}
		fillRandom(a.buf[:n], uint64(n)<<8|0x77)
		clear(b.buf)
		wc, err := r.sendRecv(a, b, &roce.SendWR{ID: 1, Opcode: roce.WRSend, Flags: roce.SendSignaled, SGL: []roce.SGE{a.mr.SGE(0, n)},
			AV: &av, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111}, 40+n)
		if err != nil {
			return "", err
		}
		if int(wc.ByteLen) != 40+n || wc.SrcQP != a.qp.QPN() || wc.Flags&roce.WCWithGRH == 0 {
			return "", fmt.Errorf("host B's completion: %d bytes from QP %#x, GRH %v; want %d from %#x with GRH",
				wc.ByteLen, wc.SrcQP, wc.Flags&roce.WCWithGRH != 0, 40+n, a.qp.QPN())
		}
		return fmt.Sprintf("B received %d bytes after the 40-byte GRH, from QP %#x", n, wc.SrcQP),
			sameBytes("B's buffer", b.buf[40:40+n], a.buf[:n])
	})
}

// snapshot is what xroce stat shows.
func (r *labRun) snapshot() *statsock.Snapshot {
	s := &statsock.Snapshot{PID: os.Getpid(), Command: "lab", Started: r.started}
	s.Phase, _ = r.phase.Load().(string)
	for _, h := range []*labHost{r.a, r.b} {
		d := statsock.Device{Name: h.name, Ifname: h.h.Ifname, Netns: h.h.Name, Addr: h.h.IP.String(),
			Datapath: "af_xdp " + h.mode, Counters: statcount.Of(h.dev.Stats())}
		if c, err := h.prog.Counters(); err == nil {
			d.Counters = append(d.Counters, statsock.Counter{Name: "xdp_redirected", Value: c.Redirected},
				statsock.Counter{Name: "xdp_injected_drops", Value: c.InjectedDrops})
		}
		for _, q := range r.qps {
			if q.host != h {
				continue
			}
			peer := ""
			if q.peer != nil {
				peer = fmt.Sprintf("%s %s %#x", q.peer.host.name, q.peer.host.h.IP, q.peer.qp.QPN())
			}
			d.QPs = append(d.QPs, statsock.QP{Name: q.name, QPN: q.qp.QPN(), Type: q.qp.Type().String(),
				State: q.qp.State().String(), Peer: peer, Counters: append([]statsock.Counter{
					{Name: "posted", Value: q.posted.Load()}, {Name: "polled", Value: q.completed.Load()},
				}, statcount.Of(q.qp.Stats())...)})
		}
		s.Devices = append(s.Devices, d)
	}
	return s
}
