//go:build linux

package perf

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/roce"
	"github.com/xroce/xroce/stream"
)

const perfStreamAbout = `
Compare byte streams of package stream (net.Conn over one RC QP) in xroce's
own protocol and in rsocket's (librdmacm's, connected over RDMA CM) with TCP
on the same link and cores, in one run: throughput of 4 KiB, 64 KiB and 1 MiB
writes (the reader reads up to 1 MiB at a time), 64-byte ping-pong latency
(p50 and p99 of the round trip), CPU seconds per GB at both ends (user+system
of each process, the server's sent back over the control connection), and how
many bytes went directly into the reader's buffer (RDMA WRITE into an
advertised Read buffer; off unless -direct) rather than through its ring.

Without HOST it is the server and waits for one client; with HOST it is the
client, which drives the tests and prints the table. Each test uses a new
connection; the control connection is TCP port -p. With -netns it makes its
own two network namespaces joined by a veth pair (198.18.0.1 and 198.18.0.2)
and runs both ends in this process (CPU is then both ends together); it needs
root. A progress line goes to stderr every 2 seconds of a long test.`

const perfStreamExamples = `  xroce perf stream -d eth0                        # server
  xroce perf stream -d eth0 198.18.0.1             # client: every test
  xroce perf stream -d eth0 -s 65536 -D 5 198.18.0.1
  sudo xroce perf stream -netns                    # no setup: a veth pair of its own`

func init() {
	perfModes["stream"] = runPerfStream
}

const (
	psPingSize  = 64      // bytes each way of a ping-pong round trip
	psReadSize  = 1 << 20 // the reader's buffer
	psBytes     = 256 << 20
	psRoundTrip = 10000
)

type psOptions struct {
	dev      string
	host     string
	port     int
	iters    int // writes per size and round trips; 0: the defaults
	duration int // seconds per test instead
	size     int // one write size; 0: all
	direct   int // stream.Config.DirectThreshold; 0: off
	ring     int
	spin     time.Duration
	tcp      bool
	rsocket  bool
	lat, bw  bool
	self     bool // -netns
	timeout  time.Duration
}

func runPerfStream(ctx context.Context, e *base.Env, args []string) error {
	o := psOptions{port: 18515, tcp: true, rsocket: true, lat: true, bw: true}
	fs := base.NewFlagSet(e, "perf stream", "[flags] [HOST]", perfStreamAbout, perfStreamExamples)
	fs.StringVar(&o.dev, "d", "", "network `interface` to use (default: the route's to HOST, or the only one with an address)")
	fs.IntVar(&o.port, "p", o.port, "TCP `port` of the control connection")
	fs.IntVar(&o.iters, "n", 0, "`iterations`: writes per size (default 256 MiB worth) and ping-pong round trips (default 10000)")
	fs.IntVar(&o.duration, "D", 0, "run each test for `seconds` instead of a number of iterations")
	fs.IntVar(&o.size, "s", 0, "test only this write size in `bytes` (default 4096, 65536 and 1048576)")
	fs.IntVar(&o.direct, "direct", 0, "direct-path threshold in `bytes`: Reads this large may be filled in place (stream.Config.DirectThreshold; 0 = off)")
	fs.IntVar(&o.ring, "ring", 0, "receive ring in `bytes` (default the package's, 1 MiB)")
	fs.DurationVar(&o.spin, "spin", 0, "a Read with nothing to read polls this `long` before it sleeps (stream.Config.ReadSpin), at both ends")
	fs.BoolVar(&o.tcp, "tcp", o.tcp, "run each test over TCP too")
	fs.BoolVar(&o.rsocket, "rsocket", o.rsocket, "run each test over an rsocket stream too (rsocket's protocol, RDMA CM on the control port + 1)")
	fs.BoolVar(&o.bw, "bw", o.bw, "run the throughput tests")
	fs.BoolVar(&o.lat, "lat", o.lat, "run the ping-pong test")
	fs.BoolVar(&o.self, "netns", false, "make two network namespaces over a veth pair and run both ends here (needs root)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up when the peer is silent this `long`")
	for _, a := range [][2]string{{"s", "size"}, {"n", "iters"}, {"D", "duration"}, {"p", "port"}, {"d", "ib-dev"}} {
		f := fs.Lookup(a[0])
		fs.Var(f.Value, a[1], "same as -"+a[0])
	}
	pos, err := base.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return base.Usagef("perf stream: at most one HOST, got %q", pos)
	}
	if len(pos) == 1 {
		o.host = pos[0]
	}
	if err := o.check(); err != nil {
		return err
	}
	if o.self {
		return perfStreamNetns(ctx, e, &o)
	}
	if o.host == "" {
		return perfStreamServer(ctx, e, &o, here)
	}
	return perfStreamClient(ctx, e, &o, here)
}

func (o *psOptions) check() error {
	switch {
	case o.iters < 0 || o.iters > 0 && o.iters < 5:
		return base.Usagef("perf stream: -n %d: want at least 5 iterations", o.iters)
	case o.duration < 0:
		return base.Usagef("perf stream: -D %d: want a number of seconds", o.duration)
	case o.iters > 0 && o.duration > 0:
		return base.Usagef("perf stream: -n and -D do not go together")
	case o.size < 0 || o.size > 16<<20:
		return base.Usagef("perf stream: -s %d: want 1..%d bytes", o.size, 16<<20)
	case o.port < 1 || o.port > 65535:
		return base.Usagef("perf stream: -p %d: want a TCP port 1..65535", o.port)
	case o.direct < 0:
		return base.Usagef("perf stream: -direct %d: want a number of bytes, 0 for off", o.direct)
	case o.ring != 0 && (o.ring < 4<<10 || o.ring > 2<<20):
		return base.Usagef("perf stream: -ring %d: want 4096..2097152 bytes", o.ring)
	case o.timeout <= 0:
		return base.Usagef("perf stream: -timeout %v: want a positive duration", o.timeout)
	case o.spin < 0 || o.spin > time.Second:
		return base.Usagef("perf stream: -spin %v: want 0 to 1s", o.spin)
	case !o.bw && !o.lat:
		return base.Usagef("perf stream: -bw=false and -lat=false leave nothing to run")
	case o.self && (o.host != "" || o.dev != ""):
		return base.Usagef("perf stream: -netns makes its own link: leave out HOST and -d")
	}
	return nil
}

func (o *psOptions) sizes() []int {
	if o.size > 0 {
		return []int{o.size}
	}
	return []int{4 << 10, 64 << 10, 1 << 20}
}

// psConfig is the stream configuration of -direct, -ring and -spin.
func psConfig(direct, ring int, spin time.Duration) stream.Config {
	return stream.Config{RingSize: ring, ReadSpin: spin, DirectThreshold: direct}
}

// The control connection carries one JSON object a line each way: the
// client's psRequest, the server's psReply.
type psRequest struct {
	Op        string        // "hello", "bw", "pp", "bye"
	Transport string        // "xroce", "rsocket", "tcp"
	Rsocket   bool          `json:",omitempty"` // hello: listen for rsocket streams too
	Direct    int           // hello: DirectThreshold, 0 for off
	Ring      int           // hello: RingSize
	Spin      time.Duration `json:",omitempty"` // hello: ReadSpin
}

type psReply struct {
	Err         string        `json:",omitempty"`
	StreamPort  int           `json:",omitempty"` // hello
	TCPPort     int           `json:",omitempty"` // hello
	RsocketPort int           `json:",omitempty"` // hello: the RDMA CM port, 0 for none
	Bytes       int64         `json:",omitempty"` // bw: bytes read
	CPU         time.Duration `json:",omitempty"` // bw: the server's CPU time during the test
	Stats       *stream.Stats `json:",omitempty"` // bw, pp over xroce: the server's counters
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// psControl is one end of the control connection.
type psControl struct {
	c       net.Conn
	enc     *json.Encoder
	dec     *json.Decoder
	timeout time.Duration
}

func newPSControl(c net.Conn, timeout time.Duration) *psControl {
	return &psControl{c: c, enc: json.NewEncoder(c), dec: json.NewDecoder(c), timeout: timeout}
}

func (p *psControl) send(v any) error {
	p.c.SetWriteDeadline(time.Now().Add(p.timeout))
	return p.enc.Encode(v)
}

// recv reads the next message, waiting at most wait.
func (p *psControl) recv(v any, wait time.Duration) error {
	p.c.SetReadDeadline(time.Now().Add(wait))
	if err := p.dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("control connection: %w: the peer closed it", err)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("control connection: the peer was silent for %v", wait)
		}
		return fmt.Errorf("control connection: %w", err)
	}
	return nil
}

// inNS runs fn where sockets and devices are to be made: in -netns mode
// a namespace's Do; otherwise fn itself. Only setup runs there, since a
// goroutine locked to its thread makes every wakeup of the loops dearer.
type inNS func(fn func() error) error

func here(fn func() error) error { return fn() }

// perfStreamServer serves one client: the tests it asks for, then it ends.
func perfStreamServer(ctx context.Context, e *base.Env, o *psOptions, do inNS) error {
	var dev *roce.Device
	if err := do(func() (err error) { dev, err = device.OpenDevice(e.Stderr, o.dev, "", "perf stream"); return err }); err != nil {
		return err
	}
	defer dev.Close()
	fmt.Fprintf(e.Stdout, "perf stream: waiting for a client on TCP port %d (%s)\n", o.port, dev.Info().Name)
	setup, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var tc net.Conn
	if err := do(func() (err error) { tc, err = device.Dial(setup, "", o.port, "perf stream"); return err }); err != nil {
		return err
	}
	defer tc.Close()
	stop := context.AfterFunc(ctx, func() { tc.Close() })
	defer stop()
	s := &psServer{o: o, e: e, dev: dev, ctl: newPSControl(tc, o.timeout), do: do}
	if err := s.serve(ctx, tc.LocalAddr().(*net.TCPAddr).IP); err != nil {
		return fmt.Errorf("perf stream: %w", err)
	}
	return nil
}

type psServer struct {
	o     *psOptions
	e     *base.Env
	dev   *roce.Device
	ctl   *psControl
	do    inNS
	sln   *stream.Listener
	rln   *stream.Listener // RDMA CM's, for rsocket streams
	agent *cm.Agent
	tln   net.Listener
	tests int
}

func (s *psServer) serve(ctx context.Context, ip net.IP) error {
	var req psRequest
	if err := s.ctl.recv(&req, s.o.timeout); err != nil {
		return err
	}
	if req.Op != "hello" {
		return fmt.Errorf("control connection: %q first, want hello (is the client xroce perf stream?)", req.Op)
	}
	cfg := psConfig(req.Direct, req.Ring, req.Spin)
	host := ip.String()
	err := s.do(func() (err error) {
		if s.sln, err = cfg.Listen(s.dev, net.JoinHostPort(host, "0")); err != nil {
			return err
		}
		if s.tln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
			s.sln.Close()
		}
		return err
	})
	if err != nil {
		s.ctl.send(psReply{Err: err.Error()})
		return err
	}
	defer s.sln.Close()
	defer s.tln.Close()
	hello := psReply{StreamPort: s.sln.Addr().(*net.TCPAddr).Port, TCPPort: s.tln.Addr().(*net.TCPAddr).Port}
	if req.Rsocket {
		if err := s.listenRS(cfg, ip); err != nil {
			s.ctl.send(psReply{Err: err.Error()})
			return err
		}
		defer s.agent.Close()
		defer s.rln.Close()
		hello.RsocketPort = s.o.port + 1
	}
	if err := s.ctl.send(hello); err != nil {
		return err
	}
	for {
		// A test may run for long; the client's next request comes
		// when it ends.
		if err := s.ctl.recv(&req, s.o.timeout+time.Duration(s.o.duration)*time.Second+time.Hour); err != nil {
			return err
		}
		if req.Op == "bye" {
			fmt.Fprintf(s.e.Stdout, "perf stream: %d tests served\n", s.tests)
			return nil
		}
		rep, err := s.test(ctx, req)
		if err != nil {
			s.ctl.send(psReply{Err: err.Error()})
			return fmt.Errorf("%s %s: %w", req.Transport, req.Op, err)
		}
		if err := s.ctl.send(rep); err != nil {
			return err
		}
		s.tests++
	}
}

// listenRS starts the device's CM agent and listens for rsocket streams on
// ip, port -p + 1.
func (s *psServer) listenRS(cfg stream.Config, ip net.IP) error {
	addr, ok := netip.AddrFromSlice(ip)
	if !ok || s.o.port+1 > 65535 {
		return fmt.Errorf("no address for rsocket streams")
	}
	return s.do(func() (err error) {
		if s.agent, err = cm.Open(s.dev, cm.AgentConfig{}); err != nil {
			return err
		}
		if s.rln, err = cfg.ListenCM(s.agent, netip.AddrPortFrom(addr.Unmap(), uint16(s.o.port+1))); err != nil {
			s.agent.Close()
		}
		return err
	})
}

// accept takes the test's connection from the listener of transport.
func (s *psServer) accept(transport string) (net.Conn, error) {
	var ln interface {
		Accept() (net.Conn, error)
	}
	switch transport {
	case "xroce":
		ln = s.sln
	case "tcp":
		ln = s.tln
	case "rsocket":
		if s.rln == nil {
			return nil, fmt.Errorf("no rsocket listener")
		}
		ln = s.rln
	default:
		return nil, fmt.Errorf("unknown transport %q", transport)
	}
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-time.After(s.o.timeout):
		// Closing the listener ends the Accept; the run is over anyway.
		s.sln.Close()
		s.tln.Close()
		if s.rln != nil {
			s.rln.Close()
		}
		return nil, fmt.Errorf("no %s connection within %v", transport, s.o.timeout)
	}
}

func (s *psServer) test(ctx context.Context, req psRequest) (psReply, error) {
	c, err := s.accept(req.Transport)
	if err != nil {
		return psReply{}, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var rep psReply
	switch req.Op {
	case "bw":
		cpu := cpuTime()
		rep.Bytes, err = drain(c, s.o.timeout)
		rep.CPU = cpuTime() - cpu
	case "pp":
		err = echo(c, s.o.timeout)
	default:
		err = fmt.Errorf("unknown test %q", req.Op)
	}
	if sc, ok := c.(*stream.Conn); ok {
		st := sc.Stats()
		rep.Stats = &st
	}
	return rep, err
}

// drain reads c until EOF and counts the bytes; each read waits at most
// timeout.
func drain(c net.Conn, timeout time.Duration) (int64, error) {
	buf := make([]byte, psReadSize)
	var total int64
	for i := 0; ; i++ {
		if i%256 == 0 {
			c.SetReadDeadline(time.Now().Add(timeout))
		}
		n, err := c.Read(buf)
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// echo answers each ping with its bytes until EOF.
func echo(c net.Conn, timeout time.Duration) error {
	buf := make([]byte, psPingSize)
	for i := 0; ; i++ {
		if i%256 == 0 {
			c.SetDeadline(time.Now().Add(timeout))
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
}

// psResult is one test's figures at the client.
type psResult struct {
	transport    string
	size         int
	writes       int
	bytes        int64
	elapsed      time.Duration
	cpuC, cpuS   time.Duration
	lat          []time.Duration
	serverStats  *stream.Stats
	clientStats  stream.Stats
	streamTested bool
}

func (r *psResult) gbits() float64 { return float64(r.bytes) * 8 / r.elapsed.Seconds() / 1e9 }

// cpuPerGB is CPU seconds per 10^9 bytes.
func cpuPerGB(cpu time.Duration, bytes int64) float64 { return cpu.Seconds() / (float64(bytes) / 1e9) }

func perfStreamClient(ctx context.Context, e *base.Env, o *psOptions, do inNS) error {
	var dev *roce.Device
	if err := do(func() (err error) { dev, err = device.OpenDevice(e.Stderr, o.dev, o.host, "perf stream"); return err }); err != nil {
		return err
	}
	defer dev.Close()
	setup, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var tc net.Conn
	err := do(func() (err error) {
		for {
			tc, err = device.Dial(setup, o.host, o.port, "perf stream")
			// -netns: the server may not listen yet.
			if err == nil || !o.self || setup.Err() != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	if err != nil {
		return err
	}
	defer tc.Close()
	stop := context.AfterFunc(ctx, func() { tc.Close() })
	defer stop()
	c := &psClient{o: o, e: e, dev: dev, ctl: newPSControl(tc, o.timeout), host: o.host, do: do, cpuBoth: o.self}
	if err := c.run(ctx); err != nil {
		return fmt.Errorf("perf stream: %w", err)
	}
	return nil
}

type psClient struct {
	o       *psOptions
	e       *base.Env
	dev     *roce.Device
	ctl     *psControl
	host    string
	do      inNS
	cpuBoth bool // both ends are this process (-netns)
	sport   int
	tport   int
	rport   int       // the server's RDMA CM port for rsocket streams
	agent   *cm.Agent // -rsocket's
	results []*psResult
}

func (c *psClient) run(ctx context.Context) error {
	o := c.o
	if err := c.ctl.send(psRequest{Op: "hello", Direct: o.direct, Ring: o.ring, Spin: o.spin, Rsocket: o.rsocket}); err != nil {
		return err
	}
	var rep psReply
	if err := c.ctl.recv(&rep, o.timeout); err != nil {
		return err
	}
	if rep.Err != "" {
		return fmt.Errorf("server: %s", rep.Err)
	}
	c.sport, c.tport, c.rport = rep.StreamPort, rep.TCPPort, rep.RsocketPort
	transports := []string{"xroce"}
	if o.rsocket {
		if c.rport == 0 {
			return fmt.Errorf("the server offers no rsocket streams")
		}
		a, err := cm.Open(c.dev, cm.AgentConfig{})
		if err != nil {
			return err
		}
		defer a.Close()
		c.agent = a
		transports = append(transports, "rsocket")
	}
	if o.tcp {
		transports = append(transports, "tcp")
	}
	c.header()
	if o.bw {
		for _, size := range o.sizes() {
			for _, tr := range transports {
				r, err := c.throughput(ctx, tr, size)
				if err != nil {
					return fmt.Errorf("%s %s writes: %w", tr, base.ByteSize(size), err)
				}
				c.results = append(c.results, r)
			}
			c.printBW(size)
		}
	}
	if o.lat {
		for _, tr := range transports {
			r, err := c.pingPong(ctx, tr)
			if err != nil {
				return fmt.Errorf("%s ping-pong: %w", tr, err)
			}
			c.results = append(c.results, r)
		}
		c.printLat()
	}
	return c.ctl.send(psRequest{Op: "bye"})
}

// dial opens the test's connection.
func (c *psClient) dial(ctx context.Context, transport string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.timeout)
	defer cancel()
	var conn net.Conn
	err := c.do(func() (err error) {
		switch transport {
		case "xroce":
			conn, err = psConfig(c.o.direct, c.o.ring, c.o.spin).Dial(ctx, c.dev, net.JoinHostPort(c.host, strconv.Itoa(c.sport)))
			return err
		case "rsocket":
			ip, err := netip.ParseAddr(c.host)
			if err != nil {
				return fmt.Errorf("rsocket streams need HOST as an address: %w", err)
			}
			cfg := psConfig(c.o.direct, c.o.ring, c.o.spin)
			cfg.Protocol = stream.ProtocolRsocket
			conn, err = cfg.DialCM(ctx, c.agent, netip.AddrPortFrom(ip.Unmap(), uint16(c.rport)))
			return err
		}
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(c.host, strconv.Itoa(c.tport)))
		return err
	})
	return conn, err
}

// start asks the server for a test and connects.
func (c *psClient) start(ctx context.Context, op, transport string) (net.Conn, error) {
	if err := c.ctl.send(psRequest{Op: op, Transport: transport}); err != nil {
		return nil, err
	}
	return c.dial(ctx, transport)
}

// finish reads the server's report of the test.
func (c *psClient) finish(r *psResult) (psReply, error) {
	var rep psReply
	if err := c.ctl.recv(&rep, c.o.timeout); err != nil {
		return rep, err
	}
	if rep.Err != "" {
		return rep, fmt.Errorf("server: %s", rep.Err)
	}
	r.serverStats = rep.Stats
	return rep, nil
}

func (c *psClient) throughput(ctx context.Context, transport string, size int) (*psResult, error) {
	o := c.o
	r := &psResult{transport: transport, size: size}
	n := o.iters
	if n == 0 {
		n = max(psBytes/size, 5)
	}
	var end time.Time
	if o.duration > 0 {
		n = -1
	}
	conn, err := c.start(ctx, "bw", transport)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	prog := newProgress(c.e.Stderr, fmt.Sprintf("stream %s %s writes", transport, base.ByteSize(size)))
	cpu := cpuTime()
	t0 := time.Now()
	if o.duration > 0 {
		end = t0.Add(time.Duration(o.duration) * time.Second)
	}
	for i := 0; n < 0 || i < n; i++ {
		if i%64 == 0 {
			now := time.Now()
			if !end.IsZero() && now.After(end) {
				break
			}
			conn.SetWriteDeadline(now.Add(o.timeout))
			prog.tick(now, i, max(n, 0), r.bytes)
		}
		if _, err := conn.Write(buf); err != nil {
			return nil, err
		}
		r.writes++
		r.bytes += int64(size)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return nil, err
	}
	rep, err := c.finish(r)
	if err != nil {
		return nil, err
	}
	r.elapsed = time.Since(t0)
	r.cpuC, r.cpuS = cpuTime()-cpu, rep.CPU
	if rep.Bytes != r.bytes {
		return nil, fmt.Errorf("the server read %d bytes, %d were written", rep.Bytes, r.bytes)
	}
	if sc, ok := conn.(*stream.Conn); ok {
		r.clientStats = sc.Stats()
		r.streamTested = true
	}
	return r, nil
}

func (c *psClient) pingPong(ctx context.Context, transport string) (*psResult, error) {
	o := c.o
	r := &psResult{transport: transport, size: psPingSize}
	n := o.iters
	if n == 0 {
		n = psRoundTrip
	}
	var end time.Time
	if o.duration > 0 {
		n = -1
	}
	conn, err := c.start(ctx, "pp", transport)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, psPingSize)
	prog := newProgress(c.e.Stderr, "stream "+transport+" ping-pong")
	if n > 0 {
		r.lat = make([]time.Duration, 0, n)
	}
	t0 := time.Now()
	if o.duration > 0 {
		end = t0.Add(time.Duration(o.duration) * time.Second)
	}
	for i := 0; n < 0 || i < n; i++ {
		t := time.Now()
		if i%256 == 0 {
			if !end.IsZero() && t.After(end) {
				break
			}
			conn.SetDeadline(t.Add(o.timeout))
			prog.tick(t, i, max(n, 0), r.bytes)
		}
		if _, err := conn.Write(buf); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			return nil, err
		}
		r.lat = append(r.lat, time.Since(t))
		r.bytes += 2 * psPingSize
	}
	r.elapsed = time.Since(t0)
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return nil, err
	}
	if _, err := c.finish(r); err != nil {
		return nil, err
	}
	if sc, ok := conn.(*stream.Conn); ok {
		r.clientStats = sc.Stats()
		r.streamTested = true
	}
	return r, nil
}

func (c *psClient) header() {
	o := c.o
	w := c.e.Stdout
	direct := "off"
	if o.direct > 0 {
		direct = base.ByteSize(o.direct)
	}
	var bound []string
	switch {
	case o.duration > 0:
		bound = append(bound, fmt.Sprintf("%d s per test", o.duration))
	case o.iters > 0 && o.bw:
		bound = append(bound, fmt.Sprintf("%d writes per size", o.iters))
	case o.bw:
		bound = append(bound, "256 MiB per size")
	}
	if o.lat && o.duration == 0 {
		bound = append(bound, fmt.Sprintf("%d round trips", cmp.Or(o.iters, psRoundTrip)))
	}
	if o.spin > 0 {
		direct += fmt.Sprintf("; reads spin %v", o.spin)
	}
	fmt.Fprintf(w, "xroce perf stream: %s -> %s on %s; direct path: %s; %s\n", c.localIP(), c.host, c.dev.Info().Name, direct, strings.Join(bound, ", "))
	cpu := "cpu-s/GB client+server"
	if c.cpuBoth {
		cpu = "cpu-s/GB (both ends)"
	}
	if o.bw {
		fmt.Fprintf(w, "\n %-12s %-10s %10s %10s %24s %8s\n", "write size", "transport", "MiB", "Gbit/s", cpu, "direct")
	}
}

func (c *psClient) localIP() string {
	if a, ok := c.ctl.c.LocalAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return "?"
}

// printBW prints the throughput lines of one size, then each stream's
// ratios to TCP.
func (c *psClient) printBW(size int) {
	w := c.e.Stdout
	var streams []*psResult
	var t *psResult
	for _, r := range c.results {
		if r.size != size || r.lat != nil {
			continue
		}
		cpu := fmt.Sprintf("%.2f+%.2f", cpuPerGB(r.cpuC, r.bytes), cpuPerGB(r.cpuS, r.bytes))
		if c.cpuBoth {
			cpu = fmt.Sprintf("%.2f", cpuPerGB(r.cpuC, r.bytes))
		}
		direct := "-"
		if r.streamTested {
			st := r.clientStats
			direct = fmt.Sprintf("%.1f%%", 100*float64(st.DirectBytes)/float64(max(st.BytesWritten, 1)))
			streams = append(streams, r)
		} else {
			t = r
		}
		fmt.Fprintf(w, " %-12s %-10s %10d %10.2f %24s %8s\n", base.ByteSize(size), r.transport, r.bytes>>20, r.gbits(), cpu, direct)
	}
	if t == nil {
		return
	}
	for _, x := range streams {
		cx, ct := x.cpuC+x.cpuS, t.cpuC+t.cpuS
		if c.cpuBoth {
			cx, ct = x.cpuC, t.cpuC
		}
		fmt.Fprintf(w, " %-12s %-10s %10s %9.2fx %23.2fx\n", "", x.transport+"/tcp", "", x.gbits()/t.gbits(),
			cpuPerGB(cx, x.bytes)/cpuPerGB(ct, t.bytes))
	}
}

func (c *psClient) printLat() {
	w := c.e.Stdout
	fmt.Fprintf(w, "\n %-23s %10s %10s %10s %10s\n", "64 B ping-pong", "round trips", "p50 µs", "p99 µs", "avg µs")
	p50 := map[string]float64{}
	var order []string
	for _, r := range c.results {
		if r.lat == nil {
			continue
		}
		s := slices.Clone(r.lat)
		slices.Sort(s)
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		fmt.Fprintf(w, " %-23s %10d %10.1f %10.1f %10.1f\n", r.transport, len(s), us(base.Percentile(s, 50)), us(base.Percentile(s, 99)),
			us(r.elapsed)/float64(max(len(s), 1)))
		p50[r.transport] = us(base.Percentile(s, 50))
		order = append(order, r.transport)
	}
	if t, ok := p50["tcp"]; ok {
		for _, tr := range order {
			if tr != "tcp" {
				fmt.Fprintf(w, " %-23s %10s %9.2fx\n", tr+"/tcp", "", p50[tr]/t)
			}
		}
	}
}

// perfStreamNetns runs both ends in this process over a veth pair of its
// own between two new namespaces.
func perfStreamNetns(ctx context.Context, e *base.Env, o *psOptions) error {
	p, err := netns.New(netns.Config{})
	if err != nil {
		return fmt.Errorf("perf stream: -netns: %w", err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, cli := *o, *o
	srv.dev, cli.dev, cli.host = p.B.Ifname, p.A.Ifname, p.B.IP.String()
	srvErr := make(chan error, 1)
	go func() {
		srvErr <- perfStreamServer(ctx, &base.Env{Stdout: io.Discard, Stderr: e.Stderr}, &srv, p.B.Do)
	}()
	cliErr := perfStreamClient(ctx, e, &cli, p.A.Do)
	if cliErr != nil {
		cancel()
	}
	if err := <-srvErr; err != nil && cliErr == nil {
		return err
	}
	return cliErr
}
