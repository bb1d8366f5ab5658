//go:build linux

package perf

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/cmd/xroce/internal/statcount"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/internal/statsock"
	"github.com/xroce/xroce/roce"
)

const perfQPsAbout = `
Measure how many RC QPs share one link: two network namespaces of its own
over a veth pair (198.18.0.0/15, AF_XDP), one xroce device in each, in this
process. For each number of QPs (-q) it connects the QPs it lacks (every
pair through the TCP exchange of ibv_rc_pingpong, or with -cm through RDMA
CM) and reports the connection rate; then for each size (-s) every QP keeps
-t RDMA WRITEs outstanding for -D seconds. A row gives the goodput, its
ratio to the first row's of that size (the single-QP figure when -q starts
at 1), and the fairness over each whole second of the run, from the bytes
each QP sent: Jain's index (Σx)²/(n·Σx²) and the slowest QP's share of
the fair one, the worst second of each. Timeouts and retransmissions are
the requester's. While it runs, 'xroce stat' shows each QP's counters
(with -w, per-QP rates) and the last second's fairness.

Needs root (namespaces, XDP). The scaling table of docs/benchmarks.md is
made with the defaults.`

const perfQPsExamples = `  sudo xroce perf qps                                   # 1 … 4096 QPs × 4 KiB and 64 KiB
  sudo xroce perf qps -q 1,256 -s 4096 -D 5
  sudo xroce perf qps -q 1,1000,10000 -s 4096 -cm      # connections through RDMA CM`

func init() {
	perfModes["qps"] = runPerfQPs
}

type pqOptions struct {
	qps      []int
	sizes    []int
	duration time.Duration
	depth    int
	cm       bool
	port     int
	statDir  string
	timeout  time.Duration
	profile  string
}

func runPerfQPs(ctx context.Context, e *base.Env, args []string) error {
	o := pqOptions{port: 18515}
	var qs, ss string
	fs := base.NewFlagSet(e, "perf qps", "[flags]", perfQPsAbout, perfQPsExamples)
	fs.StringVar(&qs, "q", "1,16,256,1024,4096", "`numbers` of QPs, comma-separated, in increasing order")
	fs.StringVar(&ss, "s", "4096,65536", "message `sizes` in bytes, comma-separated")
	fs.DurationVar(&o.duration, "D", 4*time.Second, "`duration` of each measurement (whole seconds count for fairness)")
	fs.IntVar(&o.depth, "t", 32, "WRITEs each QP keeps outstanding (`depth`; 32 × 4 KiB is 128 packets of 1 KiB per QP)")
	fs.BoolVar(&o.cm, "cm", false, "connect the QPs through RDMA CM instead of the TCP exchange")
	fs.IntVar(&o.port, "p", o.port, "`port` of the TCP exchange or of RDMA CM")
	fs.StringVar(&o.statDir, "stat-dir", statsock.DefaultDir, "publish counters for 'xroce stat' in `dir` while running (empty: do not)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up when nothing completes this `long`")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the measurements to `file` (go tool pprof)")
	pos, err := base.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return base.Usagef("perf qps: makes its own link: no HOST (got %q)", pos)
	}
	if o.qps, err = intList(qs); err != nil || !slices.IsSorted(o.qps) || o.qps[0] < 1 || o.qps[len(o.qps)-1] > perfMaxQPs {
		return base.Usagef("perf qps: -q %s: want increasing numbers of QPs, 1..%d", qs, perfMaxQPs)
	}
	if o.sizes, err = intList(ss); err != nil || slices.Min(o.sizes) < 1 || slices.Max(o.sizes) > 16<<20 {
		return base.Usagef("perf qps: -s %s: want sizes of 1..%d bytes", ss, 16<<20)
	}
	switch {
	case o.duration < time.Second:
		return base.Usagef("perf qps: -D %v: want at least 1s", o.duration)
	case o.depth < 1 || o.depth > 1024:
		return base.Usagef("perf qps: -t %d: want 1..1024", o.depth)
	case o.port < 1 || o.port > 65535:
		return base.Usagef("perf qps: -p %d: want a port 1..65535", o.port)
	case o.timeout <= 0:
		return base.Usagef("perf qps: -timeout %v: want a positive duration", o.timeout)
	}
	return perfQPs(ctx, e, &o)
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// pqRun is the state of a perf qps run: the devices, the QPs connected so
// far (a's send, b's receive the WRITEs), and the fairness of the last
// whole second for xroce stat.
type pqRun struct {
	o        *pqOptions
	e        *base.Env
	pair     *netns.Pair
	da, db   *roce.Device
	pa, pb   *roce.PD
	cq, cqb  *roce.CQ
	src, dst *roce.MR
	started  time.Time
	// mu guards as and bs, which xroce stat reads while QPs are added.
	mu      sync.Mutex
	as, bs  []*roce.QP
	phase   atomic.Value // string
	jain    atomic.Uint64
	slowest atomic.Uint64
	nqp     atomic.Int64

	// The connection method's state: the TCP exchange's connection ends,
	// or the RDMA CM agents and listener.
	ctcp, stcp net.Conn
	ca, cb     *cm.Agent
	ln         *cm.Listener
	conns      []*cm.Conn

	wcs [256]roce.WC
}

func perfQPs(ctx context.Context, e *base.Env, o *pqOptions) (err error) {
	r := &pqRun{o: o, e: e, started: time.Now()}
	r.phase.Store("setting up")
	if r.pair, err = netns.New(netns.Config{}); err != nil {
		return fmt.Errorf("perf qps: %w", err)
	}
	defer r.pair.Close()
	defer r.close()
	if err := r.setup(); err != nil {
		return fmt.Errorf("perf qps: %w", err)
	}
	if o.statDir != "" {
		if st, err := statsock.Listen(o.statDir, r.snapshot); err == nil {
			defer st.Close()
		}
	}
	info := r.da.Info()
	how := "TCP exchange (ibv_rc_pingpong's)"
	if o.cm {
		how = "RDMA CM"
	}
	fmt.Fprintf(e.Stdout, "xroce perf qps: %s -> %s over a veth pair, %s %s, RoCE MTU %d, %d WRITEs outstanding a QP, %v a row, QPs connected by %s\n\n",
		r.pair.A.IP, r.pair.B.IP, info.Datapath, info.Mode, info.ActiveMTU.Bytes(), o.depth, o.duration, how)
	fmt.Fprintf(e.Stdout, "%7s %9s %10s %8s %7s %9s %10s %9s %8s\n", "QPs", "size", "Gbit/s", "ratio", "Jain", "slowest", "setup/s", "timeouts", "retrans")
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return fmt.Errorf("perf qps: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("perf qps: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	first := map[int]float64{}
	for _, nq := range o.qps {
		add := nq - len(r.as)
		t0 := time.Now()
		r.phase.Store(fmt.Sprintf("connecting %d QPs", nq))
		if err := r.connect(ctx, nq); err != nil {
			return fmt.Errorf("perf qps: %d QPs: %w", nq, err)
		}
		setup := float64(add) / time.Since(t0).Seconds()
		r.nqp.Store(int64(nq))
		for _, size := range o.sizes {
			r.phase.Store(fmt.Sprintf("running %d QPs × %d B", nq, size))
			res, err := r.measure(ctx, nq, size)
			if err != nil {
				return fmt.Errorf("perf qps: %d QPs × %d B: %w", nq, size, err)
			}
			if _, ok := first[size]; !ok {
				first[size] = res.gbps
			}
			setupCol := "-"
			if add > 0 {
				setupCol = fmt.Sprintf("%.0f", setup)
				add = 0
			}
			fmt.Fprintf(e.Stdout, "%7d %9d %10.2f %7.2fx %7.3f %9.2f %10s %9d %8d\n", nq, size, res.gbps, res.gbps/first[size],
				res.jain, res.slowest, setupCol, res.timeouts, res.retrans)
		}
	}
	return nil
}

// setup opens the devices, one in each namespace, and what the QPs share:
// a PD, a CQ and one region a side (every QP writes the same bytes into
// the same place: this measures the transport, not memory).
func (r *pqRun) setup() error {
	p := r.pair
	var cfg roce.Config
	if err := p.A.Do(func() (err error) { r.da, err = device.OpenNIC(r.e.Stderr, "perf qps", p.A.Ifname, cfg); return err }); err != nil {
		return err
	}
	if err := p.B.Do(func() (err error) { r.db, err = device.OpenNIC(r.e.Stderr, "perf qps", p.B.Ifname, cfg); return err }); err != nil {
		return err
	}
	var err error
	if r.pa, err = r.da.AllocPD(); err != nil {
		return err
	}
	if r.pb, err = r.db.AllocPD(); err != nil {
		return err
	}
	maxQ := slices.Max(r.o.qps)
	if r.cq, err = r.da.CreateCQ(maxQ*r.o.depth + 64); err != nil {
		return err
	}
	if r.cqb, err = r.db.CreateCQ(64); err != nil {
		return err
	}
	size := slices.Max(r.o.sizes)
	if r.src, err = r.pa.RegMR(make([]byte, size), roce.AccessLocalWrite); err != nil {
		return err
	}
	if r.dst, err = r.pb.RegMR(make([]byte, size), roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return err
	}
	if r.o.cm {
		ac := cm.AgentConfig{MaxConns: maxQ + 16, Backlog: 1024}
		if r.ca, err = cm.Open(r.da, ac); err != nil {
			return err
		}
		if r.cb, err = cm.Open(r.db, ac); err != nil {
			return err
		}
		r.ln, err = r.cb.Listen(netip.AddrPortFrom(p.B.IP, uint16(r.o.port)), nil)
		return err
	}
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(p.B.IP, uint16(r.o.port)).String())
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		var err error
		r.stcp, err = ln.Accept()
		accepted <- err
	}()
	if err := p.A.Do(func() (err error) {
		r.ctcp, err = net.Dial("tcp4", netip.AddrPortFrom(p.B.IP, uint16(r.o.port)).String())
		return err
	}); err != nil {
		return err
	}
	return <-accepted
}

func (r *pqRun) close() {
	for _, c := range r.conns {
		c.Close()
	}
	for _, c := range []net.Conn{r.ctcp, r.stcp} {
		if c != nil {
			c.Close()
		}
	}
	for _, a := range []*cm.Agent{r.ca, r.cb} {
		if a != nil {
			a.Close()
		}
	}
	for _, d := range []*roce.Device{r.da, r.db} {
		if d != nil {
			d.Close()
		}
	}
}

// connect adds QP pairs until there are n, each connected by the TCP
// exchange or RDMA CM, one after another (as a program that opens its
// connections one by one would).
func (r *pqRun) connect(ctx context.Context, n int) error {
	for len(r.as) < n {
		a, err := r.pa.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: r.cq, RecvCQ: r.cq, MaxSendWR: r.o.depth, MaxRecvWR: 1, MaxSGE: 1})
		if err != nil {
			return err
		}
		b, err := r.pb.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: r.cqb, RecvCQ: r.cqb, MaxSendWR: 1, MaxRecvWR: 1, MaxSGE: 1})
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, r.o.timeout)
		if r.o.cm {
			err = r.connectCM(cctx, a, b)
		} else {
			err = r.connectTCP(cctx, a, b)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("connect QP %d: %w", len(r.as)+1, err)
		}
		r.mu.Lock()
		r.as, r.bs = append(r.as, a), append(r.bs, b)
		r.mu.Unlock()
	}
	return nil
}

func (r *pqRun) connectTCP(ctx context.Context, a, b *roce.QP) error {
	opts := roce.ConnectOptions{}
	eb, err := b.LocalEndpoint(rand.Uint32(), opts)
	if err != nil {
		return err
	}
	ea, err := a.LocalEndpoint(rand.Uint32(), opts)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		_, err := b.ConnectTCP(ctx, r.stcp, false, eb, roce.XroceCodec, opts)
		errc <- err
	}()
	_, err = a.ConnectTCP(ctx, r.ctcp, true, ea, roce.XroceCodec, opts)
	return errors.Join(err, <-errc)
}

func (r *pqRun) connectCM(ctx context.Context, a, b *roce.QP) error {
	for _, q := range []*roce.QP{a, b} {
		if err := cm.PrepareQP(q); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	var serr error
	var sc *cm.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		req, err := r.ln.Accept(ctx)
		if err != nil {
			serr = err
			return
		}
		sc, serr = req.Accept(ctx, b, &cm.ConnParam{RetryCount: 7, RNRRetryCount: 7})
	}()
	c, err := r.ca.Dial(ctx, netip.AddrPortFrom(r.pair.B.IP, uint16(r.o.port)), a, &cm.DialOptions{})
	wg.Wait()
	if c != nil {
		r.conns = append(r.conns, c)
	}
	if sc != nil {
		r.conns = append(r.conns, sc)
	}
	return errors.Join(err, serr)
}

// pqResult is one row.
type pqResult struct {
	gbps              float64
	jain, slowest     float64 // the worst whole second's
	timeouts, retrans uint64
}

// measure runs the first nq QPs for the duration, each keeping the depth
// of WRITEs outstanding, and then lets the outstanding ones complete.
func (r *pqRun) measure(ctx context.Context, nq, size int) (pqResult, error) {
	o := r.o
	qps := r.as[:nq]
	s0 := r.da.Stats()
	out := make([]int, nq)
	post := func(i int) error {
		wr := roce.SendWR{ID: uint64(i), Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled, SGL: []roce.SGE{r.src.SGE(0, size)},
			RemoteAddr: r.dst.Addr(), RKey: r.dst.RKey()}
		if err := qps[i].PostSend(&wr); err != nil {
			return err
		}
		out[i]++
		return nil
	}
	sent := func() []uint64 {
		x := make([]uint64, nq)
		for i, q := range qps {
			x[i] = q.Stats().TxBytes
		}
		return x
	}
	res := pqResult{jain: 1, slowest: 1}
	start := time.Now()
	end := start.Add(o.duration)
	nextSec, prev := start.Add(time.Second), sent()
	for i := range qps {
		for range o.depth {
			if err := post(i); err != nil {
				return res, err
			}
		}
	}
	var done uint64
	pending := nq * o.depth
	for pending > 0 {
		n, err := waitCQ(ctx, r.cq, r.wcs[:], time.Now().Add(o.timeout), o.timeout)
		if err != nil {
			return res, fmt.Errorf("%d WRITEs outstanding: %w", pending, err)
		}
		now := time.Now()
		running := now.Before(end)
		for _, wc := range r.wcs[:n] {
			if wc.Status != roce.WCSuccess {
				return res, wcError(&wc)
			}
			i := int(wc.ID)
			out[i]--
			pending--
			if running {
				done++
				if err := post(i); err != nil {
					return res, err
				}
				pending++
			}
		}
		if !now.Before(nextSec) && !nextSec.After(end) {
			cur := sent()
			d := make([]float64, nq)
			for i := range d {
				d[i] = float64(cur[i] - prev[i])
			}
			j, s := jainSlowest(d)
			res.jain, res.slowest = min(res.jain, j), min(res.slowest, s)
			r.jain.Store(uint64(j * 1000))
			r.slowest.Store(uint64(s * 1000))
			prev, nextSec = cur, nextSec.Add(time.Second)
		}
	}
	res.gbps = float64(done) * float64(size) * 8 / o.duration.Seconds() / 1e9
	s1 := r.da.Stats()
	res.timeouts, res.retrans = s1.Timeouts-s0.Timeouts, s1.Retransmits-s0.Retransmits
	return res, nil
}

// jainSlowest returns Jain's fairness index of x, (Σx)²/(n·Σx²), and the
// smallest x relative to the mean (the slowest one's share of the fair
// one).
func jainSlowest(x []float64) (jain, slowest float64) {
	var sum, sq float64
	low := x[0]
	for _, v := range x {
		sum += v
		sq += v * v
		low = min(low, v)
	}
	if sq == 0 {
		return 0, 0
	}
	return sum * sum / (float64(len(x)) * sq), low / (sum / float64(len(x)))
}

// snapshot is what xroce stat shows: the sending device with each QP's
// counters, and the last whole second's fairness.
func (r *pqRun) snapshot() *statsock.Snapshot {
	s := &statsock.Snapshot{PID: os.Getpid(), Command: "perf qps", Started: r.started}
	s.Phase, _ = r.phase.Load().(string)
	if r.da == nil {
		return s
	}
	info := r.da.Info()
	d := statsock.Device{Name: "A", Ifname: info.Name, Netns: r.pair.A.Name, Addr: r.pair.A.IP.String(),
		Datapath: strings.TrimSpace(info.Datapath + " " + info.Mode), Counters: statcount.Of(r.da.Stats())}
	d.Counters = append(d.Counters, statsock.Counter{Name: "qps_running", Value: uint64(r.nqp.Load())},
		statsock.Counter{Name: "jain_index_x1000", Value: r.jain.Load()},
		statsock.Counter{Name: "slowest_share_x1000", Value: r.slowest.Load()})
	r.mu.Lock()
	qps := r.as[:min(int(r.nqp.Load()), len(r.as))]
	r.mu.Unlock()
	for _, q := range qps {
		d.QPs = append(d.QPs, statsock.QP{Name: "writer", QPN: q.QPN(), Type: q.Type().String(), State: q.State().String(),
			Peer: r.pair.B.IP.String(), Counters: statcount.QP(q.Stats())})
	}
	s.Devices = append(s.Devices, d)
	return s
}
