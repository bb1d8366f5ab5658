//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xroce/xroce/nic"
	"github.com/xroce/xroce/roce"
)

// The xroce side of the report: the parent starts this binary twice, with
// -role server inside namespace B and -role client inside A. They set up an
// RC QP over a TCP control connection (roce.XroceCodec), then the client
// runs each test, framing it with text lines on the same connection:
//
//	client: run <test> <size>   server: ready
//	(the client measures for -time)
//	client: stop                server: cpu <seconds>
//
// and prints one JSON result per test on stdout. The server answers every
// 8-byte SEND of a latency test with one of its own.

// result is one measurement, as the client prints it.
type result struct {
	Test    string  `json:"test"` // write, send, lat
	Size    int     `json:"size"`
	Bytes   float64 `json:"bytes"`
	Seconds float64 `json:"seconds"`
	CPUA    float64 `json:"cpu_a"` // CPU seconds of the client side
	CPUB    float64 `json:"cpu_b"` // CPU seconds of the server side
	P50     float64 `json:"p50_us,omitempty"`
	P99     float64 `json:"p99_us,omitempty"`
	Iters   int     `json:"iters,omitempty"`
	Retrans uint64  `json:"retransmits"`
	RNR     uint64  `json:"rnr_naks"`
	Spin    string  `json:"spin,omitempty"` // the workers' XDP spin, if any
}

// cpuSeconds is this process's user plus system time.
func cpuSeconds() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// endpoint is one side's device and RC QP.
type endpoint struct {
	d        *roce.Device
	pd       *roce.PD
	scq, rcq *roce.CQ
	qp       *roce.QP
	buf      []byte
	mr       *roce.MR
	remote   roce.Endpoint
	recvSize int
}

const recvDepth = 256

func open(ifname string, o options) (*endpoint, error) {
	armWait = o.arm
	cfg := nic.Config{Queues: 1, Device: roce.Config{BusyPoll: o.busy}}
	if o.xspin >= 0 {
		cfg.XDP.Spin = o.xspin
	}
	cfg.XDP.Attach = o.attach
	nd, err := nic.Open(ifname, cfg)
	if err != nil {
		return nil, err
	}
	if err := nd.Fallback(); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: %s: AF_XDP not available (%v); using AF_PACKET\n", ifname, err)
	}
	d := nd.Device
	e := &endpoint{d: d, recvSize: slices.Max(o.sizes)}
	fail := func(err error) (*endpoint, error) {
		d.Close()
		return nil, err
	}
	if e.pd, err = d.AllocPD(); err != nil {
		return fail(err)
	}
	if e.scq, err = d.CreateCQ(4096); err != nil {
		return fail(err)
	}
	if e.rcq, err = d.CreateCQ(4096); err != nil {
		return fail(err)
	}
	e.buf = make([]byte, e.recvSize)
	if e.mr, err = e.pd.RegMR(e.buf, roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return fail(err)
	}
	e.qp, err = e.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: e.scq, RecvCQ: e.rcq,
		MaxSendWR: 256, MaxRecvWR: recvDepth, MaxInline: 64})
	if err != nil {
		return fail(err)
	}
	return e, nil
}

func (e *endpoint) connect(conn net.Conn, client bool) error {
	local, err := e.qp.LocalEndpoint(uint32(os.Getpid()), roce.ConnectOptions{})
	if err != nil {
		return err
	}
	local.RKey, local.Addr = e.mr.RKey(), e.mr.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.remote, err = e.qp.ConnectTCP(ctx, conn, client, local, roce.XroceCodec, roce.ConnectOptions{})
	if err != nil {
		return err
	}
	for range recvDepth {
		if err := e.postRecv(); err != nil {
			return err
		}
	}
	return nil
}

// postRecv posts a receive of the largest message into the buffer (all
// receives share it: the data is not looked at).
func (e *endpoint) postRecv() error {
	return e.qp.PostRecv(&roce.RecvWR{SGL: []roce.SGE{e.mr.SGE(0, e.recvSize)}})
}

// armWait makes wait sleep on the CQ's armed notification (-arm).
var armWait bool

// wait waits for a completion on cq: it polls and receives itself
// (Progress) for spin first, then sleeps in CQ.Wait (or with -arm on the
// CQ's notification) until a completion or the end of ctx (0, nil then).
func wait(ctx context.Context, cq *roce.CQ, spin time.Duration, wcs []roce.WC) (int, error) {
	var t0 time.Time
	for {
		if n := cq.Poll(wcs); n > 0 {
			for _, wc := range wcs[:n] {
				if wc.Status != roce.WCSuccess {
					return n, fmt.Errorf("completion %v: %v", wc.Opcode, wc.Status)
				}
			}
			return n, nil
		}
		if spin > 0 {
			if t0.IsZero() {
				t0 = time.Now()
			}
			if time.Since(t0) < spin {
				cq.Progress()
				continue
			}
		}
		if armWait {
			ch := cq.Arm()
			if cq.Len() > 0 {
				continue
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return 0, nil
			}
			continue
		}
		if err := cq.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return 0, nil
			}
			return 0, err
		}
	}
}

// serve is the server role: it answers latency pings and keeps its receive
// queue full until the client closes the control connection.
func serve(ctl string, o options) error {
	ifname := os.Getenv("BENCHREPORT_IF")
	ln, err := net.Listen("tcp", ctl)
	if err != nil {
		return err
	}
	defer ln.Close()
	e, err := open(ifname, o)
	if err != nil {
		return err
	}
	defer e.d.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := e.connect(conn, false); err != nil {
		return err
	}
	var echo atomic.Bool
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- e.serveLoop(ctx, o, &echo) }()
	r := bufio.NewReader(conn)
	var cpu0 float64
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			stop()
			return <-errc
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "run":
			echo.Store(f[1] == "lat")
			cpu0 = cpuSeconds()
			fmt.Fprintf(conn, "ready\n")
		case len(f) == 1 && f[0] == "stop":
			fmt.Fprintf(conn, "cpu %.6f\n", cpuSeconds()-cpu0)
		default:
			stop()
			return fmt.Errorf("bad control line %q", line)
		}
		select {
		case err := <-errc:
			return err
		default:
		}
	}
}

func (e *endpoint) serveLoop(ctx context.Context, o options, echo *atomic.Bool) error {
	var wcs [64]roce.WC
	var swcs [64]roce.WC
	sent := 0
	for {
		n, err := wait(ctx, e.rcq, o.spin, wcs[:])
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // stopped
		}
		for range n {
			if err := e.postRecv(); err != nil {
				return err
			}
			if echo.Load() {
				if err := e.qp.PostSend(&roce.SendWR{Opcode: roce.WRSend, Flags: roce.SendSignaled | roce.SendInline,
					SGL: []roce.SGE{e.mr.SGE(0, 8)}}); err != nil {
					return err
				}
				sent++
			}
		}
		for sent > 0 {
			m := e.scq.Poll(swcs[:])
			if m == 0 {
				break
			}
			sent -= m
		}
	}
}

// client is the client role: it runs each test and prints its results.
func client(ctl string, o options) error {
	ifname := os.Getenv("BENCHREPORT_IF")
	e, err := open(ifname, o)
	if err != nil {
		return err
	}
	defer e.d.Close()
	var conn net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		conn, err = net.DialTimeout("tcp", ctl, time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer conn.Close()
	if err := e.connect(conn, true); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	ctlDo := func(line string) (string, error) {
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(conn, "%s\n", line); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	out := json.NewEncoder(os.Stdout)
	var tests []struct {
		name string
		size int
	}
	for _, op := range []string{"write", "send"} {
		for _, s := range o.sizes {
			tests = append(tests, struct {
				name string
				size int
			}{op, s})
		}
	}
	tests = append(tests, struct {
		name string
		size int
	}{"lat", 8})
	for _, t := range tests {
		if o.only != "" && !strings.Contains(t.name, o.only) {
			continue
		}
		if l, err := ctlDo(fmt.Sprintf("run %s %d", t.name, t.size)); err != nil || l != "ready\n" {
			return fmt.Errorf("run %s: %q %v", t.name, l, err)
		}
		st0 := e.d.Stats()
		res := result{Test: t.name, Size: t.size}
		cpu0 := cpuSeconds()
		if t.name == "lat" {
			err = e.latency(o, &res)
		} else {
			err = e.bandwidth(o, t.name, t.size, &res)
		}
		res.CPUA = cpuSeconds() - cpu0
		if err != nil {
			return fmt.Errorf("%s %d: %w", t.name, t.size, err)
		}
		l, err := ctlDo("stop")
		if err != nil {
			return err
		}
		f := strings.Fields(l)
		if len(f) != 2 || f[0] != "cpu" {
			return fmt.Errorf("stop: %q", l)
		}
		res.CPUB, _ = strconv.ParseFloat(f[1], 64)
		st1 := e.d.Stats()
		res.Retrans, res.RNR = st1.Retransmits-st0.Retransmits, st1.RNRNaksRx-st0.RNRNaksRx
		if err := out.Encode(res); err != nil {
			return err
		}
	}
	return nil
}

// bandwidth streams messages of size bytes for o.dur with o.depth of them
// outstanding, and counts the bytes of those that completed.
func (e *endpoint) bandwidth(o options, op string, size int, res *result) error {
	wr := &roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled, SGL: []roce.SGE{e.mr.SGE(0, size)},
		RemoteAddr: e.remote.Addr, RKey: e.remote.RKey}
	if op == "send" {
		wr.Opcode = roce.WRSend
	}
	var wcs [64]roce.WC
	start := time.Now()
	end := start.Add(o.dur)
	outstanding, done := 0, 0
	for {
		now := time.Now()
		for outstanding < o.depth && now.Before(end) {
			if err := e.qp.PostSend(wr); err != nil {
				return err
			}
			outstanding++
		}
		if outstanding == 0 {
			break
		}
		n, err := wait(context.Background(), e.scq, 0, wcs[:])
		if err != nil {
			return err
		}
		outstanding -= n
		done += n
	}
	res.Seconds = time.Since(start).Seconds()
	res.Bytes = float64(done) * float64(size)
	return nil
}

// latency ping-pongs 8-byte SENDs for o.dur (at most o.latIter round trips)
// and records half of each round trip, as sockperf reports.
func (e *endpoint) latency(o options, res *result) error {
	wr := &roce.SendWR{Opcode: roce.WRSend, Flags: roce.SendSignaled | roce.SendInline, SGL: []roce.SGE{e.mr.SGE(0, 8)}}
	var wcs [64]roce.WC
	rtts := make([]time.Duration, 0, o.latIter)
	start := time.Now()
	end := start.Add(o.dur)
	sent := 0
	for len(rtts) < o.latIter && time.Now().Before(end) {
		t0 := time.Now()
		if err := e.qp.PostSend(wr); err != nil {
			return err
		}
		sent++
		if _, err := wait(context.Background(), e.rcq, o.spin, wcs[:1]); err != nil {
			return err
		}
		rtts = append(rtts, time.Since(t0))
		if err := e.postRecv(); err != nil {
			return err
		}
		for sent > 0 {
			m := e.scq.Poll(wcs[:])
			if m == 0 {
				break
			}
			sent -= m
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.Bytes = float64(len(rtts)) * 16
	res.Iters = len(rtts)
	if len(rtts) == 0 {
		return fmt.Errorf("no round trip")
	}
	slices.Sort(rtts)
	pct := func(p float64) float64 {
		return float64(rtts[min(len(rtts)-1, int(p*float64(len(rtts))))].Nanoseconds()) / 2 / 1e3
	}
	res.P50, res.P99 = pct(0.50), pct(0.99)
	return nil
}
