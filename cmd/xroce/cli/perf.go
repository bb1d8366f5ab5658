//go:build linux

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/cm"
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

func init() {
	register("perf", "perftest-style bandwidth and latency tests (ib_write_bw & co), interoperable with perftest", runPerf)
}

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
}

// perfModes are perf tests that are not perftest's: each parses its own
// flags (files register them from init).
var perfModes = map[string]func(ctx context.Context, e *env, args []string) error{}

func runPerf(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 {
		if run, ok := perfModes[args[0]]; ok {
			return run(ctx, e, args[1:])
		}
	}
	o := perfOptions{port: 18515, gid: -1, qps: 1, conn: "RC", size: -1, iters: -1, txDepth: -1, rxDepth: 512, cqMod: -1,
		atomicType: "FETCH_AND_ADD", tos: -1, retry: perfRetryCount}
	var cpuFreq bool
	var ibPort int
	fs := newFlagSet(e, "perf", "TEST [flags] [HOST]", perfAbout, perfExamples)
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
	fs.StringVar(&o.perftest, "perftest", "auto", "the perftest `release` to look like: 4.5 or 25.01 (its version on the wire, banner and tables), or auto: the peer's, 4.5 towards xroce")
	for _, a := range [][2]string{{"s", "size"}, {"n", "iters"}, {"D", "duration"}, {"a", "all"}, {"q", "qp"},
		{"m", "mtu"}, {"x", "gid-index"}, {"p", "port"}, {"d", "ib-dev"}, {"i", "ib-port"}, {"c", "connection"},
		{"t", "tx-depth"}, {"r", "rx-depth"}, {"Q", "cq-mod"}, {"A", "atomic_type"}, {"F", "CPU-freq"}, {"R", "rdma_cm"},
		{"T", "tos"}} {
		f := fs.Lookup(a[0])
		fs.Var(f.Value, a[1], "same as -"+a[0])
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return usagef("perf: name a test: %s", perfTestNames())
	}
	for _, t := range perfTests {
		if t.name == pos[0] {
			o.test = t
		}
	}
	if o.test.name == "" {
		return usagef("perf: unknown test %q: want one of %s", pos[0], perfTestNames())
	}
	if len(pos) > 2 {
		return usagef("perf: at most one HOST after the test, got %q", pos[1:])
	}
	if len(pos) == 2 {
		o.host = pos[1]
	}
	if ibPort != 1 {
		return usagef("perf: -i %d: an xroce device has one port, 1", ibPort)
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
		return usagef("perf: --perftest %q: want 4.5, 25.01 or auto", o.perftest)
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
		return usagef("perf: -c %s: want RC, UC or UD", o.conn)
	case o.conn == "UD" && t.verb != perftest.Send:
		return usagef("perf: %s needs -c RC or UC: UD has SENDs only", t.name)
	case o.conn == "UC" && (t.verb == perftest.Read || t.verb == perftest.Atomic):
		return usagef("perf: %s needs -c RC: UC has no READ or atomics", t.name)
	case o.size < 1 || o.size > 1<<30:
		return usagef("perf: -s %d: want 1..%d bytes", o.size, 1<<30)
	case o.iters < 5 && o.duration == 0:
		return usagef("perf: -n %d: want at least 5 iterations", o.iters)
	case o.duration < 0:
		return usagef("perf: -D %d: want a number of seconds", o.duration)
	case o.duration > 0 && o.all:
		return usagef("perf: -D and -a do not go together")
	case o.qps < 1 || o.qps > perfMaxQPs:
		return usagef("perf: -q %d: want 1..%d QPs", o.qps, perfMaxQPs)
	case o.qps > 1 && t.lat:
		return usagef("perf: latency tests use one QP: leave out -q")
	case o.txDepth < 1 || o.txDepth > 8192:
		return usagef("perf: -t %d: want 1..8192", o.txDepth)
	case o.rxDepth < 1 || o.rxDepth > 8192:
		return usagef("perf: -r %d: want 1..8192", o.rxDepth)
	case o.cqMod < 1 || o.cqMod > 1024:
		return usagef("perf: -Q %d: want 1..1024", o.cqMod)
	case o.mtu != 0 && mtuFromBytes(o.mtu) == 0:
		return usagef("perf: -m %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	case o.gid < -1 || o.gid > 255:
		return usagef("perf: -x %d: want a GID index 0..255", o.gid)
	case o.port < 1 || o.port > 65535:
		return usagef("perf: -p %d: want a TCP port 1..65535", o.port)
	case o.atomicType != "FETCH_AND_ADD" && o.atomicType != "CMP_AND_SWAP":
		return usagef("perf: -A %s: want FETCH_AND_ADD or CMP_AND_SWAP", o.atomicType)
	case o.timeout <= 0:
		return usagef("perf: -timeout %v: want a positive duration", o.timeout)
	case o.rdmaCM && o.conn == "UC":
		return usagef("perf: -R with -c UC: UC is not supported in librdmacm (perftest refuses it too): use -c RC, or leave out -R")
	case o.tos != -1 && !o.rdmaCM:
		return usagef("perf: -T %d: TOS is only valid for rdma_cm QPs: add -R", o.tos)
	case o.tos < -1 || o.tos > 255:
		return usagef("perf: -T %d: want a type of service 0..255", o.tos)
	case o.retry < 0:
		return usagef("perf: --retry_count %d: want 0 or more", o.retry)
	}
	if t.verb == perftest.Atomic && o.all {
		return usagef("perf: atomics are 8 bytes: leave out -a")
	}
	if o.duration == 0 && !t.lat {
		o.txDepth = min(o.txDepth, o.iters)
	}
	// A signaled request must fit in the send queue's window.
	o.cqMod = min(o.cqMod, o.txDepth)
	return nil
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

// perfQP is one QP of a test with its buffer: the first half is what it
// sends (or reads into), the second what the peer writes or reads.
type perfQP struct {
	qp   *roce.QP
	buf  []byte
	mr   *roce.MR
	half int
	av   *roce.AddressVector // UD: the peer's
	rqpn uint32              // UD: the peer's QP
	qkey uint32              // UD: the peer's Q_Key
}

func (p *perfQP) sendSGE(n int) roce.SGE { return p.mr.SGE(0, n) }
func (p *perfQP) recvSGE(n int) roce.SGE { return p.mr.SGE(p.half, n) }

// udGRH is the room for the GRH at the start of each UD receive.
const udGRH = 40

// perfQKey is the Q_Key of perftest's UD QPs when the TCP exchange
// connects them (DEF_QKEY); with -R they take rdma_cm's (mad.RDMAUDPQKey).
const perfQKey = 0x11111111

// perfRun is one end of a test.
type perfRun struct {
	o       *perfOptions
	e       *env
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
	wcs     [64]roce.WC
}

func perf(ctx context.Context, e *env, o *perfOptions) error {
	// Bandwidth tests wait in CQ.Wait (see waitCQ); latency tests
	// busy-poll and receive themselves (pollCQ, waitWrite).
	var cfg roce.Config
	dev, err := openDeviceConfig(o.dev, o.host, "perf", cfg)
	if err != nil {
		return err
	}
	defer dev.Close()
	r := &perfRun{o: o, e: e, server: o.host == "", dev: dev, started: time.Now()}
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
		fmt.Fprint(e.stdout, perfWaiting)
	}
	tcp, err := ppDial(setup, o.host, o.port, "perf")
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

// perfOutReads is the READs and atomics each side allows outstanding,
// shown as out_reads.
const perfOutReads = 16

// run runs the test once the exchange's connection is up.
func (r *perfRun) run(ctx context.Context) error {
	o := r.o
	if err := r.start(); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	if err := r.resources(); err != nil {
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

// deadline bounds the next exchanges (on the TCP connection, or rdma_cm's
// control connection) by d.
func (r *perfRun) deadline(d time.Duration) { r.ctl.SetDeadline(time.Now().Add(d)) }

// start runs the first exchanges: versions, system data and MTU.
func (r *perfRun) start() error {
	r.deadline(r.o.timeout)
	if r.o.perftest == "25.01" {
		r.conn.Version = perftest.Style2501.Version()
	}
	if err := r.conn.Versions(); err != nil {
		return err
	}
	// The banner and tables look like the release chosen, or like the
	// peer's (perftest 4.5's towards another xroce, which says 6.06).
	switch r.o.perftest {
	case "25.01":
		r.style = perftest.Style2501
	case "auto":
		r.style = perftest.StyleOf(r.conn.RemoteVersion)
	}
	var err error
	if r.cycle, _, err = r.conn.SysData(os.Getpagesize(), 64); err != nil {
		return err
	}
	active := r.dev.Info().ActiveMTU
	want := active
	if r.o.mtu != 0 {
		want = mtuFromBytes(r.o.mtu)
		if want > active {
			return fmt.Errorf("-m %d is above the RoCE MTU of %s (%d bytes): use -m %d or raise the interface MTU", r.o.mtu, r.dev.Info().Name, active.Bytes(), active.Bytes())
		}
	}
	m, err := r.conn.MTU(int(want))
	if err != nil {
		return err
	}
	r.mtu = roce.MTU(m)
	if o := r.o; o.conn == "UD" && o.size > r.mtu.Bytes() {
		if o.sizeSet && !o.all {
			return fmt.Errorf("-s %d: a UD message cannot be larger than the MTU (%d bytes)", o.size, r.mtu.Bytes())
		}
		fmt.Fprintf(r.e.stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", r.mtu.Bytes())
		o.size = r.mtu.Bytes()
	}
	return nil
}

// resources makes the CQs, QPs and buffers and this side's addresses.
func (r *perfRun) resources() error {
	o := r.o
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return err
	}
	n := o.qps * (o.txDepth + o.rxDepth + 16)
	if r.scq, err = r.dev.CreateCQ(n); err != nil {
		return err
	}
	if r.rcq, err = r.dev.CreateCQ(n); err != nil {
		return err
	}
	half := o.size
	if o.all {
		half = maxAllSize
	}
	typ := roce.RC
	switch o.conn {
	case "UC":
		typ = roce.UC
	case "UD":
		typ, half = roce.UD, r.mtu.Bytes()+udGRH
	}
	// perftest moves the address of each request on by its size within
	// the cycle buffer (a page), so offer at least that much.
	half = (max(half, r.cycle) + 63) &^ 63
	gid, err := localEndpoint(r.dev, nil, o.gid)
	if err != nil {
		return err
	}
	for range o.qps {
		q, err := r.pd.CreateQP(roce.QPConfig{Type: typ, SendCQ: r.scq, RecvCQ: r.rcq,
			MaxSendWR: o.txDepth + 16, MaxRecvWR: o.rxDepth, MaxSGE: 1})
		if err != nil {
			return err
		}
		p := &perfQP{qp: q, buf: make([]byte, 2*half), half: half}
		if p.mr, err = r.pd.RegMR(p.buf, roce.AccessLocalWrite|roce.AccessRemoteWrite|roce.AccessRemoteRead|roce.AccessRemoteAtomic); err != nil {
			return err
		}
		r.qps = append(r.qps, p)
		d := perftest.Dest{OutReads: perfOutReads, QPN: q.QPN(), PSN: rand.Uint32() & 0xffffff, RKey: p.mr.RKey(),
			VAddr: p.mr.Addr() + uint64(half), GID: gid.GID.As16(), GIDIndex: int32(gidIndex(r.dev, gid.GID))}
		r.my = append(r.my, d)
	}
	r.rem = make([]perftest.Dest, o.qps)
	return nil
}

// info prints perftest's banner.
func (r *perfRun) info() {
	o := r.o
	in := perftest.Info{Verb: o.test.verb, Atomic: o.atomicType, Latency: o.test.lat, Server: r.server,
		Device: r.dev.Info().Name, QPs: o.qps, Connection: o.conn, TxDepth: o.txDepth, RxDepth: o.rxDepth,
		CQMod: o.cqMod, MTU: r.mtu.Bytes(), GIDIndex: o.gid, OutReads: perfOutReads, RDMACM: o.rdmaCM, TOS: o.tos,
		Style: r.style}
	// perftest picks a GID on RoCE and shows its index: so does this.
	if in.GIDIndex < 0 {
		in.GIDIndex = int(r.my[0].GIDIndex)
	}
	perftest.PrintInfo(r.e.stdout, &in)
}

// hsAll exchanges the addresses of every QP; with print, the peer's are
// printed.
func (r *perfRun) hsAll(print bool) error {
	for i := range r.my {
		d, err := r.hs(i)
		if err != nil {
			return err
		}
		r.rem[i] = d
		if print {
			perftest.PrintDest(r.e.stdout, &r.rem[i], true, r.destVerb())
		}
	}
	return nil
}

// hs is one address exchange of QP i, bounded by the timeout.
func (r *perfRun) hs(i int) (perftest.Dest, error) {
	r.deadline(r.o.timeout)
	return r.conn.HandShake(&r.my[i])
}

// barrier is the exchange perftest uses to wait for the peer: QP 0's
// address once more, bounded by wait.
func (r *perfRun) barrier(wait time.Duration) error {
	r.deadline(wait)
	_, err := r.conn.HandShake(&r.my[0])
	return err
}

// perfConnectOptions are perftest's read/atomic depths: as requester, as
// many outstanding as the peer advertised it takes (its out_reads); as
// responder, our own out_reads. A peer advertising none gets the default.
func perfConnectOptions(my, rem *perftest.Dest) roce.ConnectOptions {
	return roce.ConnectOptions{MaxRdAtomic: uint8(min(rem.OutReads, 128)), MaxDestRdAtomic: uint8(min(my.OutReads, 128))}
}

// connect brings every QP to RTS towards the peer's.
func (r *perfRun) connect(ctx context.Context) error {
	var mine, theirs [16]byte = r.my[0].GID, r.rem[0].GID
	v4 := func(g [16]byte) bool { return string(g[:12]) == "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff" }
	if v4(mine) != v4(theirs) {
		return errors.New("found incompatibility issue with GID types (one side IPv4, the other IPv6): use the same IP version on both (-x)")
	}
	for i, p := range r.qps {
		// Send from the GID we advertised (the peer checks it).
		local := roce.Endpoint{QPN: r.my[i].QPN, PSN: r.my[i].PSN, GID: netip.AddrFrom16(r.my[i].GID)}
		remote := roce.Endpoint{LID: r.rem[i].LID, QPN: r.rem[i].QPN, PSN: r.rem[i].PSN, MTU: r.mtu}
		remote.GID = netip.AddrFrom16(r.rem[i].GID)
		cctx, cancel := context.WithTimeout(ctx, r.o.timeout)
		err := p.qp.Connect(cctx, local, remote, perfConnectOptions(&r.my[i], &r.rem[i]))
		if err == nil && r.o.conn == "UD" {
			var av roce.AddressVector
			av, err = r.dev.Resolve(cctx, remote.GID)
			p.av, p.rqpn, p.qkey = &av, remote.QPN, perfQKey
		}
		cancel()
		if err != nil {
			return fmt.Errorf("unable to connect QP %#x to %v: %w", r.my[i].QPN, remote.GID, err)
		}
	}
	return nil
}

// destVerb is the verb the addresses are printed for: with -R perftest
// prints them as its control connection's, a SEND's.
func (r *perfRun) destVerb() perftest.Verb {
	if r.o.rdmaCM {
		return perftest.Send
	}
	return r.o.test.verb
}

// gidIndex is the index of gid in dev's table, -1 if it is not there.
func gidIndex(dev *roce.Device, gid netip.Addr) int {
	for i, g := range dev.GIDs() {
		if g.As16() == gid.As16() {
			return i
		}
	}
	return -1
}

// printLocal prints this side's addresses.
func (r *perfRun) printLocal() {
	for i := range r.my {
		perftest.PrintDest(r.e.stdout, &r.my[i], false, r.destVerb())
	}
}

// test runs perftest's sequence of exchanges for the test and the test.
func (r *perfRun) test(ctx context.Context) error {
	o := r.o
	w := r.e.stdout
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

// snapshot is what xroce stat shows of the run; the QPs and peers are
// fixed once connect has run.
func (r *perfRun) snapshot() *statsock.Snapshot {
	s := &statsock.Snapshot{PID: os.Getpid(), Command: "perf " + r.o.test.name, Started: r.started}
	s.Phase, _ = r.phase.Load().(string)
	info := r.dev.Info()
	d := statsock.Device{Name: "perf", Ifname: info.Name, Addr: netip.AddrFrom16(r.my[0].GID).Unmap().String(),
		Datapath: strings.TrimSpace(info.Datapath + " " + info.Mode), Counters: counters(r.dev.Stats())}
	for i, p := range r.qps {
		d.QPs = append(d.QPs, statsock.QP{Name: r.o.test.name, QPN: p.qp.QPN(), Type: p.qp.Type().String(),
			State: p.qp.State().String(), Peer: fmt.Sprintf("%v %#x", netip.AddrFrom16(r.rem[i].GID).Unmap(), r.rem[i].QPN),
			Counters: qpCounters(p.qp.Stats())})
	}
	s.Devices = append(s.Devices, d)
	return s
}

// runWait bounds the wait for the peer's whole run.
func (r *perfRun) runWait() time.Duration {
	if r.o.duration > 0 {
		return time.Duration(r.o.duration)*time.Second + 2*r.o.timeout
	}
	return 24 * time.Hour // the run is bounded by its iterations; a dead peer closes the connection
}

// serverWait is the server's part of a one-sided test: wait for the client
// to finish, print its results (bandwidth) and close.
func (r *perfRun) serverWait(wait time.Duration, bw bool) error {
	if bw {
		if err := r.barrier(wait); err != nil {
			return err
		}
		r.deadline(r.o.timeout)
		rep, err := r.conn.BWReports(perftest.BWReport{})
		if err != nil {
			return err
		}
		r.style.PrintBW(r.e.stdout, rep, r.o.gbits)
		r.deadline(r.o.timeout)
		if err := r.conn.Close(&r.my[0]); err != nil {
			return err
		}
	} else {
		r.deadline(wait)
		if err := r.conn.Close(&r.my[0]); err != nil {
			return err
		}
	}
	io.WriteString(r.e.stdout, perftest.ResultLine)
	return nil
}

// sendTest runs send_bw and send_lat: the server posts receives, a
// barrier tells the client they are there, then the run.
func (r *perfRun) sendTest(ctx context.Context, wait time.Duration) error {
	o := r.o
	w := r.e.stdout
	if o.test.lat {
		perftest.PrintLatHeader(w, o.duration > 0)
	} else {
		r.style.PrintBWHeader(w, o.gbits)
	}
	for _, size := range r.sizes() {
		if o.test.lat || r.server {
			if err := r.postRecvs(); err != nil {
				return err
			}
		}
		if err := r.barrier(o.timeout); err != nil {
			return err
		}
		var err error
		switch {
		case o.test.lat:
			err = r.latency(ctx, size)
		case r.server:
			var rep perftest.BWReport
			if rep, err = r.receiveBW(ctx, size); err == nil {
				r.style.PrintBW(w, rep, o.gbits)
			}
		default:
			var rep perftest.BWReport
			if rep, err = r.bandwidth(ctx, size); err == nil {
				r.style.PrintBW(w, rep, o.gbits)
			}
		}
		if err != nil {
			return err
		}
		// send_bw -a meets again after each size.
		if o.all && !o.test.lat {
			if err := r.barrier(o.timeout); err != nil {
				return err
			}
		}
	}
	io.WriteString(w, perftest.ResultLine)
	r.deadline(wait)
	return r.conn.Close(&r.my[0])
}

// postRecvs fills every QP's receive queue up to the RX depth. Each
// receive takes the largest message, so that receives left over from one
// size of -a serve the next.
func (r *perfRun) postRecvs() error {
	if r.rout == nil {
		r.rout = make([]int, len(r.qps))
	}
	for i := range r.qps {
		for r.rout[i] < r.o.rxDepth {
			if err := r.postRecv(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// postRecv posts one receive on QP i.
func (r *perfRun) postRecv(i int) error {
	p := r.qps[i]
	if err := p.qp.PostRecv(&roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{p.recvSGE(p.half)}}); err != nil {
		return fmt.Errorf("couldn't post receive: %w", err)
	}
	r.rout[i]++
	return nil
}

// progress prints a progress line to stderr every 2 seconds of a run.
type progress struct {
	w     io.Writer
	start time.Time
	next  time.Time
	what  string
}

func newProgress(w io.Writer, what string) *progress {
	now := time.Now()
	return &progress{w: w, start: now, next: now.Add(2 * time.Second), what: what}
}

func (p *progress) tick(now time.Time, done, total int, bytes int64) {
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(2 * time.Second)
	el := now.Sub(p.start).Seconds()
	of := ""
	if total > 0 {
		of = fmt.Sprintf(" of %d", total)
	}
	fmt.Fprintf(p.w, "perf: %s: %d%s iterations in %.0f s, %.2f MB/sec so far\n", p.what, done, of, el, float64(bytes)/el/(1<<20))
}

// poll waits for completions on cq (busy-polling with pollCQ in latency
// tests, with waitCQ in bandwidth tests) and gives up after the timeout
// without one.
func (r *perfRun) poll(ctx context.Context, cq *roce.CQ) (int, error) {
	if n := cq.Poll(r.wcs[:]); n > 0 {
		return n, nil
	}
	if r.o.test.lat {
		return pollCQ(ctx, cq, r.wcs[:], time.Now().Add(r.o.timeout), r.o.timeout)
	}
	for {
		// Many QPs served in turn may all be far from their next
		// signaled request (-q 4096 -s 65536: 100 × 64 KiB each, 27 GB
		// before the first completion): while the peer's frames keep
		// coming, the run is long, not stuck.
		rx := r.dev.Stats().RxFrames
		n, err := waitCQ(ctx, cq, r.wcs[:], time.Now().Add(r.o.timeout), r.o.timeout)
		if errors.Is(err, errNoCompletion) && r.dev.Stats().RxFrames != rx {
			continue
		}
		return n, err
	}
}

// errNoCompletion: waitCQ waited its whole timeout.
var errNoCompletion = errors.New("no completion")

// waitCQ waits for completions on cq until deadline: it polls
// waitPolls times, yielding to other goroutines (the device's goroutine
// among them, which receives meanwhile), then sleeps in CQ.Wait, which
// receives in this goroutine, and so on. The bandwidth tests wait so:
// their completions come in streams. Busy-polling and receiving in the
// poller (pollCQ) measured no better for them: on veth between two
// namespaces (load 6-7) BW average 56-93 MB/s against 92-106 for
// write_bw 64 KiB, 78-110 against 105-127 for send_bw 4 KiB and 58-75
// against 74-134 for read_bw 4 KiB; in the interop VM's compare mode
// better in one run and worse in the next.
func waitCQ(ctx context.Context, cq *roce.CQ, wcs []roce.WC, deadline time.Time, timeout time.Duration) (int, error) {
	for {
		for range waitPolls {
			if n := cq.Poll(wcs); n > 0 {
				return n, nil
			}
			runtime.Gosched()
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		err := cq.Wait(wctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return 0, fmt.Errorf("%w for %v: is the peer still there?", errNoCompletion, timeout)
			}
			return 0, err
		}
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
	}
}

// waitPolls is how many times waitCQ polls before it sleeps.
const waitPolls = 200

func wcError(wc *roce.WC) error {
	return &wcStatusError{status: wc.Status, qpn: wc.QPN, id: wc.ID}
}

// wcStatusError is a completion that failed.
type wcStatusError struct {
	status roce.WCStatus
	qpn    uint32
	id     uint64
}

func (e *wcStatusError) Error() string {
	return fmt.Sprintf("completion with error: %v (%d) on QP %#x, wr_id %d", e.status, int(e.status), e.qpn, e.id)
}

// sendWR builds QP i's request of size bytes.
func (r *perfRun) sendWR(i, size int) roce.SendWR {
	p, rem := r.qps[i], &r.rem[i]
	wr := roce.SendWR{ID: uint64(i)}
	switch r.o.test.verb {
	case perftest.Write:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = roce.WRRDMAWrite, []roce.SGE{p.sendSGE(size)}, rem.VAddr, rem.RKey
	case perftest.Read:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = roce.WRRDMARead, []roce.SGE{p.sendSGE(size)}, rem.VAddr, rem.RKey
	case perftest.Atomic:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = roce.WRAtomicFetchAdd, []roce.SGE{p.sendSGE(8)}, rem.VAddr, rem.RKey
		wr.CompareAdd = 1
		if r.o.atomicType == "CMP_AND_SWAP" {
			wr.Opcode, wr.CompareAdd, wr.Swap = roce.WRAtomicCmpAndSwp, 0, 1
		}
	default:
		wr.Opcode, wr.SGL = roce.WRSend, []roce.SGE{p.sendSGE(size)}
		if p.av != nil {
			wr.AV, wr.RemoteQPN, wr.RemoteQKey = p.av, p.rqpn, p.qkey
		}
	}
	return wr
}

// bandwidth runs the client's side of a bandwidth test for one size:
// every QP keeps up to the TX depth requests outstanding, one in cqMod
// signaled.
func (r *perfRun) bandwidth(ctx context.Context, size int) (perftest.BWReport, error) {
	o := r.o
	nq := len(r.qps)
	iters := o.iters
	var end time.Time
	if o.duration > 0 {
		iters = 0
		end = time.Now().Add(time.Duration(o.duration) * time.Second)
	}
	total := iters * nq
	var posted, completed []time.Duration
	if o.duration == 0 {
		posted, completed = make([]time.Duration, 0, total), make([]time.Duration, 0, total)
	}
	scnt, ccnt := make([]int, nq), make([]int, nq)
	wrs := make([]roce.SendWR, nq)
	for i := range wrs {
		wrs[i] = r.sendWR(i, size)
	}
	origin := time.Now()
	var first time.Duration = -1
	var last time.Duration
	var done int
	prog := newProgress(r.e.stderr, o.test.name)
	stopped := false
	for {
		if o.duration > 0 && !stopped && time.Now().After(end) {
			stopped = true
		}
		all := true
		for i := range r.qps {
			limit := iters
			if o.duration > 0 {
				// Post while running; once stopped, up to the next
				// signaled request, so that every one completes.
				limit = scnt[i] + o.txDepth
				if stopped {
					limit = (scnt[i] + o.cqMod - 1) / o.cqMod * o.cqMod
				}
			}
			for scnt[i] < limit && scnt[i]-ccnt[i] < o.txDepth {
				wr := &wrs[i]
				wr.Flags = 0
				if (scnt[i]+1)%o.cqMod == 0 || o.duration == 0 && scnt[i]+1 == limit {
					wr.Flags = roce.SendSignaled
				}
				if err := r.qps[i].qp.PostSend(wr); err != nil {
					return perftest.BWReport{}, fmt.Errorf("couldn't post send: %w", err)
				}
				if first < 0 {
					first = time.Since(origin)
				}
				if posted != nil {
					posted = append(posted, time.Since(origin))
				}
				scnt[i]++
			}
			if scnt[i] != ccnt[i] || o.duration == 0 && scnt[i] < limit {
				all = false
			}
		}
		if all && (o.duration == 0 || stopped) {
			break
		}
		n, err := r.poll(ctx, r.scq)
		if err != nil {
			return perftest.BWReport{}, fmt.Errorf("after %d of %d completions: %w", done, total, err)
		}
		now := time.Since(origin)
		for _, wc := range r.wcs[:n] {
			if wc.Status != roce.WCSuccess {
				return perftest.BWReport{}, wcError(&wc)
			}
			i := int(wc.ID)
			// A signaled request completes the unsignaled ones
			// before it.
			covered := max(min(o.cqMod, scnt[i]-ccnt[i]), 1)
			ccnt[i] += covered
			done += covered
			for range covered {
				if completed != nil {
					completed = append(completed, now)
				}
			}
			last = now
		}
		prog.tick(time.Now(), done, total, int64(done)*int64(size))
	}
	if o.duration > 0 {
		return perftest.Rate(size, done, last-first, o.gbits), nil
	}
	return perftest.BW(size, posted, completed[:len(posted)], o.cqMod, o.gbits), nil
}

// receiveBW is the server's side of send_bw: count the receives, keep
// the receive queues full, and compute the bandwidth from the first
// receive to the last.
func (r *perfRun) receiveBW(ctx context.Context, size int) (perftest.BWReport, error) {
	o := r.o
	nq := len(r.qps)
	total := o.iters * nq
	// The receiver sees no posts: it times the messages after the first
	// batch of receives, from that batch to the last (the first batch's
	// bytes arrived before its clock started).
	var t0, tl time.Duration
	n0 := 0
	got := make([]int, nq)
	origin := time.Now()
	var end time.Time
	if o.duration > 0 {
		total = 0
		end = origin.Add(time.Duration(o.duration)*time.Second + o.timeout)
	}
	prog := newProgress(r.e.stderr, o.test.name)
	done := 0
	for total == 0 || done < total {
		if o.duration > 0 && time.Now().After(end) {
			break
		}
		n, err := r.poll(ctx, r.rcq)
		if err != nil {
			if o.duration > 0 && done > 0 {
				break // the client stopped sending
			}
			if o.conn == "UD" && done > 0 && ctx.Err() == nil {
				fmt.Fprintf(r.e.stderr, "perf: %s: %d of %d messages lost (UD does not retransmit)\n", o.test.name, total-done, total)
				break
			}
			return perftest.BWReport{}, fmt.Errorf("after %d of %d receives: %w", done, total, err)
		}
		now := time.Since(origin)
		for _, wc := range r.wcs[:n] {
			if wc.Status != roce.WCSuccess {
				return perftest.BWReport{}, wcError(&wc)
			}
			i := int(wc.ID)
			got[i]++
			r.rout[i]--
			done++
			if n0 == 0 || now == t0 {
				t0, n0 = now, done
			}
			tl = now
			if o.duration > 0 || got[i]+r.rout[i] < o.iters {
				if err := r.postRecv(i); err != nil {
					return perftest.BWReport{}, err
				}
			}
		}
		prog.tick(time.Now(), done, total, int64(done)*int64(size))
	}
	return receiverRate(size, done, n0, t0, tl, o.duration > 0, o.gbits), nil
}

// receiverRate is the receiver's report: done messages, the first n0 of
// them received at t0 (one batch), the last at tl. Its peak is its
// average. A duration run reports no rate, as perftest's server; a run
// whose receives all came in one batch reports none either (zero, never
// bytes over the zero time between two reads of the clock).
func receiverRate(size, done, n0 int, t0, tl time.Duration, duration, gbits bool) perftest.BWReport {
	if duration || done < 2 || tl <= t0 {
		return perftest.BWReport{Size: uint64(size), Iters: uint64(done)}
	}
	rep := perftest.Rate(size, done-n0, tl-t0, gbits)
	rep.Iters = uint64(done)
	return rep
}

// latency runs one size of a latency test on QP 0.
func (r *perfRun) latency(ctx context.Context, size int) error {
	o := r.o
	iters := o.iters
	var end time.Time
	if o.duration > 0 {
		iters = 1 << 62
		end = time.Now().Add(time.Duration(o.duration) * time.Second)
	}
	var posted []time.Duration
	origin := time.Now()
	r.prog = newProgress(r.e.stderr, o.test.name)
	var err error
	var n int
	switch o.test.verb {
	case perftest.Write:
		n, err = r.writeLat(ctx, size, iters, end, origin, &posted)
	case perftest.Read:
		n, err = r.readLat(ctx, size, iters, end, origin, &posted)
	default:
		n, err = r.sendLat(ctx, size, iters, end, origin, &posted)
	}
	if err != nil {
		return err
	}
	rtt := o.test.verb != perftest.Read
	if o.duration > 0 {
		perftest.PrintLatDuration(r.e.stdout, size, n, time.Since(origin), rtt)
		return nil
	}
	perftest.PrintLat(r.e.stdout, perftest.Latency(size, posted, rtt))
	return nil
}

// latProgress reports a latency run's progress now and then.
func (r *perfRun) latProgress(n, size int) {
	if n%1024 != 0 {
		return
	}
	total := r.o.iters
	if r.o.duration > 0 {
		total = 0
	}
	r.prog.tick(time.Now(), n, total, int64(n)*int64(size))
}

// over reports whether a duration run is over.
func over(end time.Time) bool { return !end.IsZero() && time.Now().After(end) }

// writeLat is perftest's write ping-pong: each side writes the message
// into the peer's buffer, its last byte the sequence number, and waits for
// the peer's write to change its own last byte. The server writes first.
func (r *perfRun) writeLat(ctx context.Context, size, iters int, end, origin time.Time, posted *[]time.Duration) (int, error) {
	p := r.qps[0]
	wr := r.sendWR(0, size)
	wr.Flags = roce.SendSignaled
	pollAt := p.half + size - 1
	scnt, rcnt, ccnt := 0, 0, 0
	for scnt < iters || rcnt < iters || ccnt < scnt {
		if rcnt < iters && !(scnt < 1 && r.server) {
			rcnt++
			if err := r.waitWrite(ctx, p, pollAt, byte(rcnt), end); err != nil {
				return scnt, err
			}
			if over(end) {
				return scnt, nil // each side ends a duration run at its own time
			}
		}
		if over(end) {
			iters = max(scnt, rcnt)
		}
		// The previous WRITE must be done before its buffer changes (it
		// is, but for its ACK, once the peer has answered it).
		for ccnt < scnt {
			n, err := r.pollOne(ctx, r.scq)
			if err != nil {
				if scnt == iters && rcnt == iters && r.peerDone(err) {
					return scnt, nil
				}
				return scnt, err
			}
			ccnt += n
		}
		if scnt < iters {
			*posted = append(*posted, time.Since(origin))
			r.latProgress(len(*posted), size)
			scnt++
			p.buf[size-1] = byte(scnt)
			if err := p.qp.PostSend(&wr); err != nil {
				return scnt, fmt.Errorf("couldn't post send: %w", err)
			}
		}
	}
	return scnt, nil
}

// waitWrite waits until the byte at off of p's buffer is want: the peer's
// WRITE has landed. A WRITE completes nothing on this side, so it watches
// the QP's received-frame counter (atomic loads, no lock) and looks at the
// byte (MR.Load8: under the workers' locks, as the peer's next WRITE may
// land while we look) only when a frame has come. Between looks it does
// the device's receive work itself (roce.Device.Progress), as a poller of
// a CQ does: no worker goroutine has to wake up for the WRITE to land
// (before, it spun 50 µs and then napped, because a spinning waiter
// starved the workers: write_lat's median was 60 µs and its mean 101 µs
// between two processes here, 45 and 955 spinning always). It gives up
// after the timeout, or at end (0 then).
func (r *perfRun) waitWrite(ctx context.Context, p *perfQP, off int, want byte, end time.Time) error {
	deadline := time.Now().Add(r.o.timeout)
	last := ^uint64(0)
	for i := 1; ; i++ {
		if rx := p.qp.Stats().RxFrames; rx != last {
			last = rx
			if p.mr.Load8(off) == want {
				return nil
			}
		}
		r.dev.Progress()
		if i%spinYield == 0 {
			runtime.Gosched()
		}
		if i%1024 == 0 {
			if over(end) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no write from the peer for %v (message %d)", r.o.timeout, want)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
}

// readLat is the client's read loop: one READ at a time.
func (r *perfRun) readLat(ctx context.Context, size, iters int, end, origin time.Time, posted *[]time.Duration) (int, error) {
	wr := r.sendWR(0, size)
	wr.Flags = roce.SendSignaled
	n := 0
	for n < iters && !over(end) {
		*posted = append(*posted, time.Since(origin))
		r.latProgress(len(*posted), size)
		if err := r.qps[0].qp.PostSend(&wr); err != nil {
			return n, fmt.Errorf("couldn't post read: %w", err)
		}
		k, err := r.poll(ctx, r.scq)
		if err != nil {
			return n, err
		}
		if r.wcs[0].Status != roce.WCSuccess {
			return n, wcError(&r.wcs[0])
		}
		n += k
	}
	return n, nil
}

// sendLat is perftest's send ping-pong: the client sends first, each side
// answers a receive with a send.
func (r *perfRun) sendLat(ctx context.Context, size, iters int, end, origin time.Time, posted *[]time.Duration) (int, error) {
	p := r.qps[0]
	wr := r.sendWR(0, size)
	wr.Flags = roce.SendSignaled
	scnt, rcnt, ccnt := 0, 0, 0
	for scnt < iters || rcnt < iters {
		if rcnt < iters && !(scnt < 1 && !r.server) {
			var n int
			var err error
			if end.IsZero() {
				n, err = r.pollOne(ctx, r.rcq)
			} else {
				// A duration run ends on each side at its own
				// time: stop waiting then.
				n, err = r.pollUntil(ctx, r.rcq, end)
				if err == nil && n == 0 {
					break
				}
			}
			if err != nil {
				return scnt, fmt.Errorf("after %d receives: %w", rcnt, err)
			}
			rcnt += n
			r.rout[0] -= n
			for range n {
				if err := r.postRecv(0); err != nil {
					return scnt, err
				}
			}
		}
		if over(end) {
			iters = max(scnt, rcnt)
		}
		if scnt < iters {
			*posted = append(*posted, time.Since(origin))
			r.latProgress(len(*posted), size)
			scnt++
			if err := p.qp.PostSend(&wr); err != nil {
				return scnt, fmt.Errorf("couldn't post send: %w", err)
			}
		}
		n, err := r.drain(r.scq)
		if err != nil {
			return scnt, err
		}
		ccnt += n
		for scnt-ccnt > r.o.txDepth+8 {
			n, err := r.pollOne(ctx, r.scq)
			if err != nil {
				return scnt, err
			}
			ccnt += n
		}
	}
	for ccnt < scnt {
		n, err := r.pollOne(ctx, r.scq)
		if err != nil {
			if r.peerDone(err) {
				return scnt, nil
			}
			return scnt, err
		}
		ccnt += n
	}
	return scnt, nil
}

// peerDone says whether err, met waiting for the completion of this side's
// last message of a latency test, is the peer's having ended: the peer
// disconnects once it has that message (its loop ends there), and when the
// ACK of it is lost its DREQ comes first, which flushes the send (as
// perftest, which does not wait for that completion, never sees). Only
// with rdma_cm, where the disconnection is known.
func (r *perfRun) peerDone(err error) bool {
	var wcErr *wcStatusError
	if !errors.As(err, &wcErr) || wcErr.status != roce.WCWRFlushErr || r.cm == nil {
		return false
	}
	for _, c := range r.cm.data {
		if errors.Is(c.Err(), cm.ErrDisconnected) {
			return true
		}
	}
	return false
}

// pollOne waits for completions on cq and checks their status.
func (r *perfRun) pollOne(ctx context.Context, cq *roce.CQ) (int, error) {
	n, err := r.poll(ctx, cq)
	if err != nil {
		return 0, err
	}
	for _, wc := range r.wcs[:n] {
		if wc.Status != roce.WCSuccess {
			return 0, wcError(&wc)
		}
	}
	return n, nil
}

// pollUntil waits for completions on cq until end (0 then), or the
// timeout.
func (r *perfRun) pollUntil(ctx context.Context, cq *roce.CQ, end time.Time) (int, error) {
	deadline := time.Now().Add(r.o.timeout)
	for i := 0; ; i++ {
		n, err := r.drain(cq) // an empty CQ's Poll does the device's receive work
		if n > 0 || err != nil {
			return n, err
		}
		if i%spinYield == spinYield-1 {
			runtime.Gosched()
		}
		if i%1024 == 1023 {
			if over(end) {
				return 0, nil
			}
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("no completion for %v: is the peer still there?", r.o.timeout)
			}
		}
	}
}

// drain collects the completions cq holds, without waiting.
func (r *perfRun) drain(cq *roce.CQ) (int, error) {
	n := cq.Poll(r.wcs[:])
	for _, wc := range r.wcs[:n] {
		if wc.Status != roce.WCSuccess {
			return 0, wcError(&wc)
		}
	}
	return n, nil
}

// perfMaxQPs is the most QPs -q takes: perftest's MAX_QP_NUM.
const perfMaxQPs = 16384
