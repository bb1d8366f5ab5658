//go:build linux

package rstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/roce"
	"github.com/xroce/xroce/stream"
)

// xroce rstream is rdma-core's rstream (librdmacm/examples/rstream.c):
// a ping-pong of -C transfers of -S bytes each way, -I times, over an
// rsocket, or over TCP with -T s, with the same flags, the same exchanges
// (a 16-byte sync each way, then the client sends first) and the same
// table, so either end can be rstream. Without -S/-C/-I it runs
// rstream's suite: latency tests over the sizes of its table on one
// connection, then bandwidth tests on a second. The stream is package
// stream's Conn speaking rsocket's protocol; -d names the interface (the
// device), which rstream does not have.

// Cmd is xroce rstream.
var Cmd = base.Command{Name: "rstream", Summary: "rsocket stream test with a peer, as rdma-core's rstream", Run: runRstream}

// rstreamSizes are rstream's test sizes; those of option 1 only with -S all.
var rstreamSizes = []struct{ size, option int }{
	{1 << 6, 0},
	{1 << 7, 1}, {1<<7 + 1<<6, 1},
	{1 << 8, 1}, {1<<8 + 1<<7, 1},
	{1 << 9, 1}, {1<<9 + 1<<8, 1},
	{1 << 10, 1}, {1<<10 + 1<<9, 1},
	{1 << 11, 1}, {1<<11 + 1<<10, 1},
	{1 << 12, 0}, {1<<12 + 1<<11, 1},
	{1 << 13, 1}, {1<<13 + 1<<12, 1},
	{1 << 14, 1}, {1<<14 + 1<<13, 1},
	{1 << 15, 1}, {1<<15 + 1<<14, 1},
	{1 << 16, 0}, {1<<16 + 1<<15, 1},
	{1 << 17, 1}, {1<<17 + 1<<16, 1},
	{1 << 18, 1}, {1<<18 + 1<<17, 1},
	{1 << 19, 1}, {1<<19 + 1<<18, 1},
	{1 << 20, 0}, {1<<20 + 1<<19, 1},
	{1 << 21, 1}, {1<<21 + 1<<20, 1},
	{1 << 22, 1}, {1<<22 + 1<<21, 1},
}

// rstreamOptions is rstream's command line.
type rstreamOptions struct {
	dst, src   string
	numeric    bool // -f ip
	bufSize    int  // -B
	iterations int  // -I
	count      int  // -C
	size       int  // -S
	custom     bool // -I, -C or -S SIZE: one test
	sizeOption int  // -S all: every size
	port       string
	keepalive  int  // -k, seconds
	tcp        bool // -T s: plain TCP sockets
	verify     bool // -T v
	ifname     string
}

func rstreamUsage(w io.Writer, name string) {
	fmt.Fprintf(w, "usage: %s\n", name)
	fmt.Fprint(w, "\t[-s server_address]\n"+
		"\t[-b bind_address]\n"+
		"\t[-f address_format]\n"+
		"\t    name, ip, ipv6, or gid\n"+
		"\t[-B buffer_size]\n"+
		"\t[-i inline_size]\n"+
		"\t[-I iterations]\n"+
		"\t[-C transfer_count]\n"+
		"\t[-S transfer_size or all]\n"+
		"\t[-p port_number]\n"+
		"\t[-k keepalive_time]\n"+
		"\t[-T test_option]\n"+
		"\t    s|sockets - use standard tcp/ip sockets\n"+
		"\t    a|async - asynchronous operation (use poll)\n"+
		"\t    b|blocking - use blocking calls\n"+
		"\t    f|fork - fork server processing\n"+
		"\t    n|nonblocking - use nonblocking calls\n"+
		"\t    r|resolve - use rdma cm to resolve address\n"+
		"\t    v|verify - verify data\n"+
		"\t[-d interface]  (xroce: the RoCE interface)\n")
}

// setTestOpt is rstream's set_test_opt: false for an unknown option. The
// calling modes (async, blocking, non-blocking) and the address
// resolution are the C library's business; a Go stream always blocks, so
// they are taken and change nothing on the wire.
func (o *rstreamOptions) setTestOpt(arg string) bool {
	if len(arg) == 1 {
		switch arg[0] {
		case 's', 'f':
			o.tcp = true
		case 'v':
			o.verify = true
		case 'a', 'b', 'n', 'r':
		default:
			return false
		}
		return true
	}
	for _, w := range []struct {
		prefix string
		f      func()
	}{
		{"socket", func() { o.tcp = true }}, {"async", nil}, {"block", nil}, {"nonblock", nil},
		{"resolve", nil}, {"verify", func() { o.verify = true }}, {"fork", func() { o.tcp = true }},
	} {
		if rdmacm.HasPrefixFold(arg, w.prefix) {
			if w.f != nil {
				w.f()
			}
			return true
		}
	}
	return false
}

// parseRstream reads rstream's command line as its main does; done with
// code for a mistake (the usage on stdout, status 1).
func parseRstream(stdout io.Writer, args []string) (o *rstreamOptions, code int, done bool) {
	o = &rstreamOptions{iterations: 1, size: 1000, count: 1000, port: "7471"}
	opts, _ := base.Getopt(args, "s:b:f:B:i:I:C:S:p:k:T:d:")
	for _, op := range opts {
		switch op.C {
		case 's':
			o.dst = op.Arg
		case 'b':
			o.src = op.Arg
		case 'f':
			switch {
			case rdmacm.HasPrefixFold(op.Arg, "ip"):
				o.numeric = true
			case rdmacm.HasPrefixFold(op.Arg, "gid"):
				fmt.Fprintln(stdout, "rstream: -f gid (AF_IB addresses) is not supported on RoCE")
				return o, 1, true
			default:
				fmt.Fprintln(stdout, "Warning: unknown address format")
			}
		case 'B':
			o.bufSize = base.Atoi(op.Arg)
		case 'i':
			_ = base.Atoi(op.Arg) // inline size: how the C library posts, not what goes on the wire
		case 'I':
			o.custom, o.iterations = true, base.Atoi(op.Arg)
		case 'C':
			o.custom, o.count = true, base.Atoi(op.Arg)
		case 'S':
			if rdmacm.HasPrefixFold(op.Arg, "all") {
				o.sizeOption = 1
			} else {
				o.custom, o.size = true, base.Atoi(op.Arg)
			}
		case 'p':
			o.port = op.Arg
		case 'k':
			o.keepalive = base.Atoi(op.Arg)
		case 'd':
			o.ifname = op.Arg
		case 'T':
			if o.setTestOpt(op.Arg) {
				continue
			}
			fallthrough
		default:
			rstreamUsage(stdout, "rstream")
			return o, 1, true
		}
	}
	if o.custom && (o.size <= 0 || o.count <= 0 || o.iterations <= 0) {
		fmt.Fprintln(stdout, "rstream: -S, -C and -I must be positive")
		return o, 1, true
	}
	return o, 0, false
}

func runRstream(ctx context.Context, e *base.Env, args []string) error {
	o, code, done := parseRstream(e.Stdout, args)
	if done {
		return base.Status(code)
	}
	r := &rstream{o: o, stdout: e.Stdout, stderr: e.Stderr}
	return base.Status(r.run(ctx))
}

// rstream is one run.
type rstream struct {
	o              *rstreamOptions
	stdout, stderr io.Writer
	d              *rdmacm.Device
	ln             net.Listener
	peer           netip.AddrPort
	buf            []byte
	fmtNext        byte // format_buf's counter: the next byte sent
	verNext        byte // verify_buf's counter: the next byte expected
	verTotal       int64
	// The current test: its name, transfer size, count and iterations.
	name               string
	size, count, iters int
}

func (r *rstream) printf(format string, a ...any) { fmt.Fprintf(r.stdout, format, a...) }

func (r *rstream) run(ctx context.Context) int {
	if err := r.open(ctx); err != nil {
		fmt.Fprintf(r.stderr, "rstream: %v\n", err)
		return 255
	}
	defer r.close()
	r.buf = make([]byte, max(r.o.size, 16)) // the sync moves 16 bytes
	if !r.o.custom {
		r.buf = make([]byte, rstreamSizes[len(rstreamSizes)-1].size)
	}
	r.printf("%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	if r.o.custom {
		r.name, r.size, r.count, r.iters = "custom", r.o.size, r.o.count, r.o.iterations
		return r.session(ctx, func(c net.Conn) int { return r.test(c) })
	}
	ret := r.session(ctx, func(c net.Conn) int {
		for _, t := range rstreamSizes {
			if t.option > r.o.sizeOption {
				continue
			}
			r.name = sizeStr(int64(t.size), 5) + "_lat"
			r.size, r.count, r.iters = t.size, 1, sizeToCount(t.size)
			r.test(c) // rstream goes on to the next size whatever happened
		}
		return 0
	})
	if ret != 0 {
		return ret
	}
	return r.session(ctx, func(c net.Conn) int {
		for _, t := range rstreamSizes {
			if t.option > r.o.sizeOption {
				continue
			}
			r.name = sizeStr(int64(t.size), 5) + "_bw"
			r.size, r.count, r.iters = t.size, sizeToCount(t.size), 1
			r.test(c)
		}
		return 0
	})
}

// open looks the addresses up, opens the device (not for -T s) and, on
// the server, listens.
func (r *rstream) open(ctx context.Context) error {
	var local, peer netip.Addr
	if r.o.src != "" {
		a, gerr := rdmacm.LookupAddr(ctx, r.o.src, r.o.numeric)
		if gerr != nil {
			return fmt.Errorf("getaddrinfo: %v", gerr)
		}
		local = a
	}
	if r.o.dst != "" {
		a, gerr := rdmacm.LookupAddr(ctx, r.o.dst, r.o.numeric)
		if gerr != nil {
			return fmt.Errorf("getaddrinfo: %v", gerr)
		}
		peer = a
	}
	port, gerr := rdmacm.LookupPort(r.o.port)
	if gerr != nil {
		return fmt.Errorf("getaddrinfo: %v", gerr)
	}
	r.peer = netip.AddrPortFrom(peer, port)
	bind := netip.AddrPortFrom(local, port)
	if !local.IsValid() {
		bind = netip.AddrPortFrom(netip.IPv4Unspecified(), port)
	}
	if r.o.tcp {
		if r.o.dst == "" {
			ln, err := net.Listen("tcp", bind.String())
			if err != nil {
				return fmt.Errorf("rbind: %w", err)
			}
			r.ln = ln
		}
		return nil
	}
	ifname, ierr := rdmacm.Interface(r.o.ifname, local, peer)
	if ierr != nil {
		return ierr
	}
	d, err := rdmacm.Open(r.stderr, "rstream", ifname)
	if err != nil {
		return err
	}
	r.d = d
	if r.o.dst == "" {
		ln, err := r.config().ListenCM(d.Agent, bind)
		if err != nil {
			return fmt.Errorf("rlisten: %w", err)
		}
		r.ln = ln
		rdmacm.Listening()
	}
	return nil
}

// config is the stream's: rsocket's protocol, rstream's socket buffers
// (-B, else 512 KiB) as the ring, keepalive -k, and rsocket's retry count
// 7, which rxe and xroce take as for ever: a peer that stalls for a while
// (an emulated guest under load) is waited for, as rstream waits, and so
// is the end of the last sends at close (rclose waits for ever; here at
// most rdmacm.PeerTimeout).
func (r *rstream) config() stream.Config {
	ring := 1 << 19
	if r.o.bufSize > 0 {
		ring = min(max(r.o.bufSize, 4<<10), 2<<20) &^ 1
	}
	return stream.Config{Protocol: stream.ProtocolRsocket, RingSize: ring,
		Keepalive: time.Duration(r.o.keepalive) * time.Second, Connect: roce.ConnectOptions{RetryCnt: 7},
		Linger: rdmacm.PeerTimeout()}
}

func (r *rstream) close() {
	if r.ln != nil {
		r.ln.Close()
	}
	if r.d != nil {
		r.d.Close()
	}
}

// session connects (client) or accepts (server), runs f and shuts the
// connection down.
func (r *rstream) session(ctx context.Context, f func(c net.Conn) int) int {
	c, err := r.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return rdmacm.ExitInterrupted
		}
		fmt.Fprintf(r.stdout, "%s: %v\n", map[bool]string{true: "rconnect", false: "raccept"}[r.o.dst != ""], err)
		return 255
	}
	if r.o.keepalive > 0 && !r.o.tcp {
		r.printf("Keepalive: ON\n  time: %d\n", r.o.keepalive)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	ret := f(c)
	stop()
	if cw, ok := c.(interface{ CloseWrite() error }); ok && r.o.tcp {
		cw.CloseWrite()
	}
	c.Close()
	if ctx.Err() != nil {
		return rdmacm.ExitInterrupted
	}
	return ret
}

func (r *rstream) connect(ctx context.Context) (net.Conn, error) {
	if r.o.dst == "" {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := r.ln.Accept()
			ch <- res{c, err}
		}()
		select {
		case x := <-ch:
			return x.c, x.err
		case <-ctx.Done():
			r.ln.Close()
			return nil, ctx.Err()
		}
	}
	if r.o.tcp {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", r.peer.String())
	}
	cctx, cancel := context.WithTimeout(ctx, rdmacm.PeerTimeout())
	defer cancel()
	return r.config().DialCM(cctx, r.d.Agent, r.peer)
}

// test is rstream's run_test: the sync, then iterations of count
// transfers one way and count back (the client sends first), timed, and
// the table's line.
func (r *rstream) test(c net.Conn) int {
	client := r.o.dst != ""
	if ret := r.sync(c, client); ret != 0 {
		return ret
	}
	start := time.Now()
	for range r.iters {
		for range r.count {
			if ret := r.xfer(c, r.size, client); ret != 0 {
				return ret
			}
		}
		for range r.count {
			if ret := r.xfer(c, r.size, !client); ret != 0 {
				return ret
			}
		}
	}
	r.show(time.Since(start))
	return 0
}

// sync is rstream's sync_test: 16 bytes from the client, 16 back.
func (r *rstream) sync(c net.Conn, client bool) int {
	if ret := r.xfer(c, 16, client); ret != 0 {
		return ret
	}
	return r.xfer(c, 16, !client)
}

// xfer sends (send) or receives size bytes; with -T v the bytes sent are
// format_buf's running counter and those received are checked against
// verify_buf's.
func (r *rstream) xfer(c net.Conn, size int, send bool) int {
	b := r.buf[:size]
	if send {
		if r.o.verify {
			for i := range b {
				b[i] = r.fmtNext
				r.fmtNext++
			}
		}
		if _, err := c.Write(b); err != nil {
			r.printf("rsend: %v\n", rdmacm.ErrText(err))
			return 255
		}
		return 0
	}
	if _, err := io.ReadFull(c, b); err != nil {
		r.printf("rrecv: %v\n", rdmacm.ErrText(err))
		return 255
	}
	if r.o.verify {
		for i := range b {
			if b[i] != r.verNext {
				r.printf("data verification failed byte %d\n", r.verTotal)
				return 255
			}
			r.verNext++
			r.verTotal++
		}
	}
	return 0
}

// show is rstream's show_perf.
func (r *rstream) show(d time.Duration) {
	usec := float64(d.Microseconds())
	if usec == 0 {
		usec = 1
	}
	bytes := int64(r.iters) * int64(r.count) * int64(r.size) * 2
	r.printf("%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", r.name, sizeStr(int64(r.size), 32), cntStr(int64(r.count)),
		cntStr(int64(r.iters)), sizeStr(bytes, 32), usec/1e6, float64(bytes*8)/(1000*usec),
		usec/float64(r.iters)/float64(r.count*2))
}

// sizeStr is librdmacm's examples' size_str, truncated to fit a buffer
// of n bytes as snprintf does: "64", "1.5k", "4m".
func sizeStr(size int64, n int) string {
	base, mag := int64(1), ""
	switch {
	case size >= 1<<30:
		base, mag = 1<<30, "g"
	case size >= 1<<20:
		base, mag = 1<<20, "m"
	case size >= 1<<10:
		base, mag = 1<<10, "k"
	}
	var s string
	if frac := (size % base) * 10 / base; size/base < 10 && frac != 0 {
		s = fmt.Sprintf("%d.%d%s", size/base, frac, mag)
	} else {
		s = fmt.Sprintf("%d%s", size/base, mag)
	}
	if len(s) > n-1 {
		s = s[:n-1]
	}
	return s
}

// cntStr is librdmacm's examples' cnt_str.
func cntStr(c int64) string {
	switch {
	case c >= 1e9:
		return fmt.Sprintf("%db", c/1e9)
	case c >= 1e6:
		return fmt.Sprintf("%dm", c/1e6)
	case c >= 1e3:
		return fmt.Sprintf("%dk", c/1e3)
	}
	return fmt.Sprint(c)
}

// sizeToCount is librdmacm's examples' size_to_count.
func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}
