//go:build linux

package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/bpf"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/internal/perftest"
	"github.com/xroce/xroce/internal/statsock"
	"github.com/xroce/xroce/roce"
)

const perfAbout = `
Measure bandwidth or latency against a peer the way the perftest suite does
(ib_write_bw, ib_read_lat, ...), speaking perftest's out-of-band exchange
over TCP port 18515, so that either end can be xroce or perftest. TEST is one
of write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat, send_lat.

Without HOST it is the server and waits for one client; with HOST it is the
client. Both print perftest's banner, the QP addresses and the result table:
for bandwidth " #bytes  #iterations  BW peak  BW average  MsgRate", for
latency t_min, t_max, t_typical (median), t_avg, t_stdev and the 99% and
99.9% percentiles, in microseconds (for write and send latency, half of a
round trip, as perftest reports).

The exchange is that of perftest 4.5 (Debian bookworm's perftest
4.5+0.17-1, version 6.06 on the wire) and of later releases that keep it;
peers older than 5.70 are refused, as perftest does. -F is accepted (there is
no CPU frequency to check). A progress line goes to stderr every 2 seconds of
a long run.

With -R both ends connect as perftest -R does, through RDMA CM on the same
port: one RC connection that carries the exchange in place of TCP, and one
connection for each data QP; run the peer with -R too. With -c UD (send_bw,
send_lat) the client finds each of the server's UD QPs with SIDR (rdma_cm's
UDP port space, Q_Key 0x01234567). UC is refused as perftest refuses it.`

const perfExamples = `  xroce perf write_bw -d eth0                      # server
  xroce perf write_bw -d eth0 -s 65536 -n 5000 198.18.0.1
  xroce perf read_lat -a -n 100 198.18.0.1
  xroce perf send_bw -D 10 --report_gbits 198.18.0.1
  xroce perf write_bw -R -q 4 198.18.0.1          # QPs connected with rdma_cm (ib_write_bw -R)
  xroce perf send_bw -R -c UD 198.18.0.1          # UD QPs found with SIDR (ib_send_bw -R -c UD)
  ib_write_bw -d rxe0 -x 1 198.18.0.2              # perftest as the client of an xroce server`

// Cmd is xroce perf: perftest's tests, and its own (perf qps, perf
// stream).
var Cmd = base.Command{Name: "perf", Summary: "perftest-style bandwidth and latency tests (ib_write_bw & co), interoperable with perftest", Run: runPerf}

// perfTest is one of the tests.
type perfTest struct {
	name string
	verb perftest.Verb
	lat  bool
}

var perfTests = []perfTest{
	{"write_bw", perftest.Write, false},
	{"read_bw", perftest.Read, false},
	{"send_bw", perftest.Send, false},
	{"atomic_bw", perftest.Atomic, false},
	{"write_lat", perftest.Write, true},
	{"read_lat", perftest.Read, true},
	{"send_lat", perftest.Send, true},
}

type perfOptions struct {
	test       perfTest
	size       int
	sizeSet    bool // -s was given
	iters      int
	duration   int
	all        bool
	qps        int
	mtu        int
	gid        int
	port       int
	dev        string
	gbits      bool
	conn       string
	txDepth    int
	rxDepth    int
	cqMod      int
	atomicType string
	statDir    string
	timeout    time.Duration
	host       string
	rdmaCM     bool   // -R: connect with rdma_cm
	tos        int    // -T: the data connections' type of service; -1: none
	retry      int    // --retry_count: the rdma_cm connections' retry counts
	perftest   string // --perftest: "auto", "4.5" or "25.01"

	rate   perfRate // --rate_limit and its companions (perf_rate.go)
	markCE float64  // --mark-ce: the fraction of frames received the XDP program marks CE (perf_cc.go)
}

// perfModes are perf tests that are not perftest's: each parses its own
// flags (files register them from init).
var perfModes = map[string]func(ctx context.Context, e *base.Env, args []string) error{}

func runPerf(ctx context.Context, e *base.Env, args []string) error {
	if len(args) > 0 {
		if run, ok := perfModes[args[0]]; ok {
			return run(ctx, e, args[1:])
		}
	}
	o := perfOptions{port: 18515, gid: -1, qps: 1, conn: "RC", size: -1, iters: -1, txDepth: -1, rxDepth: 512, cqMod: -1,
		atomicType: "FETCH_AND_ADD", tos: -1, retry: perfRetryCount}
	var cpuFreq bool
	var ibPort int
	fs := base.NewFlagSet(e, "perf", "TEST [flags] [HOST]", perfAbout, perfExamples)
	fs.IntVar(&o.size, "s", o.size, "message size in `bytes` (default 65536 for bandwidth, 2 for latency, 8 for atomics)")
	fs.IntVar(&o.iters, "n", o.iters, "`iterations` (default 5000 for bandwidth, 1000 for latency)")
	fs.IntVar(&o.duration, "D", 0, "run for `seconds` instead of a number of iterations")
	fs.BoolVar(&o.all, "a", false, "run every size from 2 to 2^23 bytes")
	fs.IntVar(&o.qps, "q", o.qps, "`number` of QPs (bandwidth tests)")
	fs.IntVar(&o.mtu, "m", 0, "path MTU in `bytes` (256 … 4096; default the interface's RoCE MTU)")
	fs.IntVar(&o.gid, "x", o.gid, "local GID `index` (default: the first IPv4-mapped GID)")
	fs.IntVar(&o.port, "p", o.port, "`port` of the exchange (TCP; with -R, the rdma_cm port of every connection)")
	fs.StringVar(&o.dev, "d", "", "network `interface` to use (the device)")
	fs.IntVar(&ibPort, "i", 1, "`port` of the device (only 1 exists)")
	fs.BoolVar(&o.gbits, "report_gbits", false, "report Gbit/s instead of MB/s")
	fs.StringVar(&o.conn, "c", o.conn, "connection `type`: RC, UC (write and send tests), UD (send tests)")
	fs.IntVar(&o.txDepth, "t", o.txDepth, "send queue `depth` (default 128 for bandwidth, 1 for latency)")
	fs.IntVar(&o.rxDepth, "r", o.rxDepth, "receive queue `depth` (send tests)")
	fs.IntVar(&o.cqMod, "Q", o.cqMod, "ask for a completion every `N` messages (default 100 for bandwidth, 1 for latency)")
	fs.StringVar(&o.atomicType, "A", o.atomicType, "atomic `type`: FETCH_AND_ADD or CMP_AND_SWAP")
	fs.BoolVar(&cpuFreq, "F", false, "accepted, ignored (perftest: do not fail on CPU frequency differences)")
	fs.BoolVar(&o.rdmaCM, "R", false, "connect the QPs with rdma_cm, as perftest -R (RC; UD with SIDR)")
	fs.IntVar(&o.tos, "T", o.tos, "type of service `tos` (0..255) of the rdma_cm data connections (with -R)")
	fs.IntVar(&o.retry, "retry_count", o.retry, "retry `count` of the rdma_cm connections (with -R; at most 7 is used)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up when the peer is silent this `long`")
	fs.StringVar(&o.statDir, "stat-dir", statsock.DefaultDir, "publish counters for 'xroce stat' in `dir` while running (empty: do not)")
	o.rate.addFlags(fs)
	o.addCCFlags(fs)
	fs.StringVar(&o.perftest, "perftest", "auto", "the perftest `release` to look like: 4.5 or 25.01 (its version on the wire, banner and tables), or auto: the peer's, 4.5 towards xroce")
	for _, a := range [][2]string{{"s", "size"}, {"n", "iters"}, {"D", "duration"}, {"a", "all"}, {"q", "qp"},
		{"m", "mtu"}, {"x", "gid-index"}, {"p", "port"}, {"d", "ib-dev"}, {"i", "ib-port"}, {"c", "connection"},
		{"t", "tx-depth"}, {"r", "rx-depth"}, {"Q", "cq-mod"}, {"A", "atomic_type"}, {"F", "CPU-freq"}, {"R", "rdma_cm"},
		{"T", "tos"}} {
		f := fs.Lookup(a[0])
		fs.Var(f.Value, a[1], "same as -"+a[0])
	}
	pos, err := base.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return base.Usagef("perf: name a test: %s", perfTestNames())
	}
	for _, t := range perfTests {
		if t.name == pos[0] {
			o.test = t
		}
	}
	if o.test.name == "" {
		return base.Usagef("perf: unknown test %q: want one of %s", pos[0], perfTestNames())
	}
	if len(pos) > 2 {
		return base.Usagef("perf: at most one HOST after the test, got %q", pos[1:])
	}
	if len(pos) == 2 {
		o.host = pos[1]
	}
	if ibPort != 1 {
		return base.Usagef("perf: -i %d: an xroce device has one port, 1", ibPort)
	}
	if err := o.check(); err != nil {
		return err
	}
	return perf(ctx, e, &o)
}

func perfTestNames() string {
	var s []string
	for _, t := range perfTests {
		s = append(s, t.name)
	}
	for name := range perfModes {
		s = append(s, name)
	}
	slices.Sort(s[len(perfTests):])
	return strings.Join(s, ", ")
}

// maxAllSize is the largest size of -a: 2^23 bytes.
const maxAllSize = 1 << 23

func (o *perfOptions) check() error {
	switch o.perftest {
	case "auto", "4.5", "25.01":
	default:
		return base.Usagef("perf: --perftest %q: want 4.5, 25.01 or auto", o.perftest)
	}
	t := o.test
	def := func(v *int, bw, lat int) {
		if *v < 0 {
			*v = bw
			if t.lat {
				*v = lat
			}
		}
	}
	o.sizeSet = o.size >= 0
	def(&o.size, 65536, 2)
	def(&o.iters, 5000, 1000)
	def(&o.txDepth, 128, 1)
	def(&o.cqMod, 100, 1)
	if t.verb == perftest.Atomic {
		o.size = 8
	}
	o.conn = strings.ToUpper(o.conn)
	switch {
	case o.conn != "RC" && o.conn != "UC" && o.conn != "UD":
		return base.Usagef("perf: -c %s: want RC, UC or UD", o.conn)
	case o.conn == "UD" && t.verb != perftest.Send:
		return base.Usagef("perf: %s needs -c RC or UC: UD has SENDs only", t.name)
	case o.conn == "UC" && (t.verb == perftest.Read || t.verb == perftest.Atomic):
		return base.Usagef("perf: %s needs -c RC: UC has no READ or atomics", t.name)
	case o.size < 1 || o.size > 1<<30:
		return base.Usagef("perf: -s %d: want 1..%d bytes", o.size, 1<<30)
	case o.iters < 5 && o.duration == 0:
		return base.Usagef("perf: -n %d: want at least 5 iterations", o.iters)
	case o.duration < 0:
		return base.Usagef("perf: -D %d: want a number of seconds", o.duration)
	case o.duration > 0 && o.all:
		return base.Usagef("perf: -D and -a do not go together")
	case o.qps < 1 || o.qps > perfMaxQPs:
		return base.Usagef("perf: -q %d: want 1..%d QPs", o.qps, perfMaxQPs)
	case o.qps > 1 && t.lat:
		return base.Usagef("perf: latency tests use one QP: leave out -q")
	case o.txDepth < 1 || o.txDepth > 8192:
		return base.Usagef("perf: -t %d: want 1..8192", o.txDepth)
	case o.rxDepth < 1 || o.rxDepth > 8192:
		return base.Usagef("perf: -r %d: want 1..8192", o.rxDepth)
	case o.cqMod < 1 || o.cqMod > 1024:
		return base.Usagef("perf: -Q %d: want 1..1024", o.cqMod)
	case o.mtu != 0 && device.MTUFromBytes(o.mtu) == 0:
		return base.Usagef("perf: -m %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	case o.gid < -1 || o.gid > 255:
		return base.Usagef("perf: -x %d: want a GID index 0..255", o.gid)
	case o.port < 1 || o.port > 65535:
		return base.Usagef("perf: -p %d: want a TCP port 1..65535", o.port)
	case o.atomicType != "FETCH_AND_ADD" && o.atomicType != "CMP_AND_SWAP":
		return base.Usagef("perf: -A %s: want FETCH_AND_ADD or CMP_AND_SWAP", o.atomicType)
	case o.timeout <= 0:
		return base.Usagef("perf: -timeout %v: want a positive duration", o.timeout)
	case o.rdmaCM && o.conn == "UC":
		return base.Usagef("perf: -R with -c UC: UC is not supported in librdmacm (perftest refuses it too): use -c RC, or leave out -R")
	case o.tos != -1 && !o.rdmaCM:
		return base.Usagef("perf: -T %d: TOS is only valid for rdma_cm QPs: add -R", o.tos)
	case o.tos < -1 || o.tos > 255:
		return base.Usagef("perf: -T %d: want a type of service 0..255", o.tos)
	case o.retry < 0:
		return base.Usagef("perf: --retry_count %d: want 0 or more", o.retry)
	}
	if t.verb == perftest.Atomic && o.all {
		return base.Usagef("perf: atomics are 8 bytes: leave out -a")
	}
	if o.duration == 0 && !t.lat {
		o.txDepth = min(o.txDepth, o.iters)
	}
	// A signaled request must fit in the send queue's window.
	o.cqMod = min(o.cqMod, o.txDepth)
	if err := o.checkCC(); err != nil {
		return err
	}
	return o.rate.check(o)
}

// sizes are the message sizes to run: with -a, 2 … 2^23 bytes (UD: up
// to the MTU).
func (r *perfRun) sizes() []int {
	o := r.o
	if !o.all {
		return []int{o.size}
	}
	top := maxAllSize
	if o.conn == "UD" {
		top = r.mtu.Bytes()
	}
	var s []int
	for n := 2; n <= top; n *= 2 {
		s = append(s, n)
	}
	return s
}

// perfRun is one end of a test.
type perfRun struct {
	o       *perfOptions
	e       *base.Env
	server  bool
	dev     *roce.Device
	conn    *perftest.Conn
	ctl     interface{ SetDeadline(time.Time) error } // the exchange's connection: TCP, or rdma_cm's (cm.ctl)
	cm      *perfCM                                   // -R
	style   perftest.Style                            // the banner's and tables' release
	pd      *roce.PD
	scq     *roce.CQ
	rcq     *roce.CQ
	qps     []*perfQP
	my, rem []perftest.Dest
	cycle   int       // the cycle buffer: perftest spreads its requests over this many bytes of ours
	rout    []int     // receives outstanding per QP
	prog    *progress // of the latency run under way
	started time.Time
	phase   atomic.Value // string: what the run does now, for xroce stat
	mtu     roce.MTU
	xdpProg *bpf.Program // the device's XDP program when --mark-ce marks (perf_cc.go)
	wcs     [64]roce.WC
}

func perf(ctx context.Context, e *base.Env, o *perfOptions) error {
	// Bandwidth tests wait in CQ.Wait (see waitCQ); latency tests
	// busy-poll and receive themselves (pollCQ, waitWrite).
	var cfg roce.Config
	nd, err := device.OpenNICDevice(e.Stderr, o.dev, o.host, "perf", cfg)
	if err != nil {
		return err
	}
	dev := nd.Device
	defer dev.Close()
	r := &perfRun{o: o, e: e, server: o.host == "", dev: dev, started: time.Now()}
	if err := r.markCE(nd); err != nil {
		return err
	}
	r.phase.Store("connecting")
	setup, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.rdmaCM {
		ok := false
		defer func() { r.cmClose(ok) }()
		if err := r.cmControl(ctx, setup); err != nil {
			return err
		}
		if err := r.run(ctx); err != nil {
			return r.cmErr(err)
		}
		ok = true
		return nil
	}
	if r.server {
		fmt.Fprint(e.Stdout, perfWaiting)
	}
	tcp, err := device.Dial(setup, o.host, o.port, "perf")
	if err != nil {
		return err
	}
	defer tcp.Close()
	// Each exchange is bounded by the timeout; a cancelled ctx closes
	// the connection.
	stop := context.AfterFunc(ctx, func() { tcp.Close() })
	defer stop()
	r.ctl = tcp
	r.conn = perftest.NewConn(tcp, !r.server)
	return r.run(ctx)
}

// perfWaiting is what perftest's server prints before a client connects.
const perfWaiting = "\n************************************\n* Waiting for client to connect... *\n************************************\n"

// run runs the test once the exchange's connection is up.
func (r *perfRun) run(ctx context.Context) error {
	o := r.o
	if err := r.start(); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	if err := r.resources(); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	if err := r.pace(o.size); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	if o.rdmaCM {
		if err := r.cmConnect(ctx); err != nil {
			return fmt.Errorf("perf: %s: %w", o.test.name, err)
		}
	}
	if err := r.test(ctx); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: the peer closed the connection", err)
		}
		return fmt.Errorf("perf: %s: %w", o.test.name, err)
	}
	return nil
}

// test runs perftest's sequence of exchanges for the test and the test.
func (r *perfRun) test(ctx context.Context) error {
	o := r.o
	w := r.e.Stdout
	r.info()
	lat := o.test.lat
	if lat && o.test.verb != perftest.Send {
		if err := r.barrier(o.timeout); err != nil {
			return err
		}
	}
	if err := r.hsAll(false); err != nil {
		return err
	}
	if !o.rdmaCM { // else rdma_cm connected them
		if err := r.connect(ctx); err != nil {
			return err
		}
	}
	if o.statDir != "" {
		// Best effort: xroce stat is a convenience, not a reason to fail.
		if st, err := statsock.Listen(o.statDir, r.snapshot); err == nil {
			defer st.Close()
		}
	}
	r.phase.Store("running")
	defer r.reportCCAfter()
	if o.test.verb == perftest.Send {
		if err := r.barrier(o.timeout); err != nil {
			return err
		}
	}
	r.printLocal()
	if err := r.hsAll(true); err != nil {
		return err
	}
	if o.test.verb != perftest.Send {
		if err := r.barrier(o.timeout); err != nil {
			return err
		}
	}
	// The longest a side may wait for the other's run to end.
	runWait := r.runWait()
	switch {
	case o.test.verb == perftest.Send:
		return r.sendTest(ctx, runWait)
	case lat && o.test.verb == perftest.Read && r.server:
		return r.serverWait(runWait, false)
	case lat:
		perftest.PrintLatHeader(w, o.duration > 0)
		for _, size := range r.sizes() {
			if err := r.latency(ctx, size); err != nil {
				return err
			}
		}
		io.WriteString(w, perftest.ResultLine)
		if o.test.verb == perftest.Read {
			r.deadline(o.timeout)
			return r.conn.Close(&r.my[0])
		}
		return nil
	case r.server:
		r.style.PrintBWHeader(w, o.gbits)
		return r.serverWait(runWait, true)
	}
	r.style.PrintBWHeader(w, o.gbits)
	var rep perftest.BWReport
	for _, size := range r.sizes() {
		var err error
		if rep, err = r.bandwidth(ctx, size); err != nil {
			return err
		}
		r.style.PrintBW(w, rep, o.gbits)
	}
	io.WriteString(w, perftest.ResultLine)
	if err := r.barrier(o.timeout); err != nil {
		return err
	}
	r.deadline(o.timeout)
	if _, err := r.conn.BWReports(rep); err != nil {
		return err
	}
	r.deadline(o.timeout)
	return r.conn.Close(&r.my[0])
}

// perfMaxQPs is the most QPs -q takes: perftest's MAX_QP_NUM.
const perfMaxQPs = 16384
