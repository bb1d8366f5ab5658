//go:build linux

package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/device"
	"github.com/xroce/xroce/roce"
)

const pingpongAbout = `
Exchange messages with a peer the way rdma-core's ibv_rc_pingpong (RC, the
default), ibv_uc_pingpong (--uc), ibv_ud_pingpong (--ud) and
ibv_srq_pingpong (--srq, with -q QPs) do, and interoperate with them: the
same TCP exchange of QP number, PSN and GID on port 18515, the same SEND
ping-pong and the same output, so a script can use either tool on either
side.

Without HOST it is the server: it waits for one client, then answers each
message. With HOST it is the client: it connects to the server at HOST and
sends first. Each side prints its own and its peer's address, then the
throughput and the time per round trip.

-d names the network interface (xroce's device); without it the client uses
the interface of the route to HOST and the server the only interface with an
address. -g picks the GID index (default: the interface's first IPv4 address,
as ::ffff:a.b.c.d; index 0 is the link-local GID). -c validates the data as
ibv_rc_pingpong -c does (the first byte of each 4 KiB page) and, between two
xroce ends, every byte. -l (service level) and -o/-O/-P (on-demand paging)
are accepted and ignored: xroce has no service levels on untagged Ethernet
and its memory is always present. Without -e the completion queue is
busy-polled, as ibv_rc_pingpong does, and the polling goroutine itself
receives and answers the frames (xroce's caller-driven progress); with -e
it sleeps in CQ.Wait until a completion comes, and the waiting goroutine
does that work when it wakes (the device's goroutines do it while nobody
waits).`

const pingpongExamples = `  xroce pingpong -d eth0 -g 1                 # server
  xroce pingpong -d eth0 -g 1 198.18.0.1      # client
  xroce pingpong --ud -s 1024 -n 10000 198.18.0.1
  ibv_rc_pingpong -d rxe0 -g 1 198.18.0.2     # the rdma-core tool as the client of an xroce server`

// Cmd is xroce pingpong.
var Cmd = base.Command{Name: "pingpong", Summary: "ping-pong SENDs with a peer like ibv_rc_pingpong / ibv_ud_pingpong", Run: runPingpong}

// Work request IDs, as rc_pingpong's, so a completion says which queue.
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// ppGRH is the area at the start of each UD receive buffer where the GRH
// (for IPv4, 20 zero bytes and the IPv4 header) lands.
const ppGRH = 40

// ppPage is the page size rc_pingpong's -c checks in.
const ppPage = 4096

type pingpongOptions struct {
	port    int
	dev     string
	ibPort  int
	gid     int
	size    int
	mtu     int
	rxDepth int
	iters   int
	sl      int
	events  bool
	check   bool
	ud      bool
	uc      bool
	srq     bool
	numQP   int
	timeout time.Duration
	host    string
}

func runPingpong(ctx context.Context, e *base.Env, args []string) error {
	o := pingpongOptions{port: 18515, ibPort: 1, gid: -1, size: -1, mtu: 1024, rxDepth: 500, iters: 1000, numQP: 16}
	var odp, iodp, prefetch, newSend, ts, dm bool
	fs := base.NewFlagSet(e, "pingpong", "[flags] [HOST]", pingpongAbout, pingpongExamples)
	alias := func(short, long string) {
		f := fs.Lookup(short)
		fs.Var(f.Value, long, "same as -"+short)
	}
	fs.IntVar(&o.port, "p", o.port, "listen on or connect to TCP `port`")
	fs.StringVar(&o.dev, "d", "", "network `interface` to use (the device)")
	fs.IntVar(&o.ibPort, "i", o.ibPort, "`port` of the device (only 1 exists)")
	fs.IntVar(&o.gid, "g", o.gid, "local GID `index` (default: the first IPv4-mapped GID)")
	fs.IntVar(&o.size, "s", o.size, "`bytes` per message (default 4096; 2048 with --ud)")
	fs.IntVar(&o.mtu, "m", o.mtu, "path MTU in `bytes`: 256, 512, 1024, 2048 or 4096 (RC)")
	fs.IntVar(&o.rxDepth, "r", o.rxDepth, "`number` of receives to keep posted")
	fs.IntVar(&o.iters, "n", o.iters, "`number` of exchanges")
	fs.IntVar(&o.sl, "l", 0, "service `level` (accepted, ignored)")
	fs.BoolVar(&o.events, "e", false, "sleep on completion notifications instead of polling")
	fs.BoolVar(&o.check, "c", false, "validate the received data")
	fs.BoolVar(&odp, "o", false, "on-demand paging (accepted, ignored)")
	fs.BoolVar(&iodp, "O", false, "implicit on-demand paging (accepted, ignored)")
	fs.BoolVar(&prefetch, "P", false, "prefetch an ODP MR (accepted, ignored)")
	fs.BoolVar(&newSend, "N", false, "use the new post send API (accepted, ignored: xroce has one)")
	fs.BoolVar(&ts, "t", false, "completion timestamps (not supported)")
	fs.BoolVar(&dm, "j", false, "device memory (not supported)")
	fs.BoolVar(&o.ud, "ud", false, "unreliable datagram, as ibv_ud_pingpong")
	fs.BoolVar(&o.uc, "uc", false, "unreliable connection, as ibv_uc_pingpong")
	fs.BoolVar(&o.srq, "srq", false, "several RC QPs on a shared receive queue, as ibv_srq_pingpong")
	fs.IntVar(&o.numQP, "q", o.numQP, "with --srq: `number` of QPs")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up when the peer is silent this `long` (connection setup, each completion)")
	for _, a := range [][2]string{{"p", "port"}, {"d", "ib-dev"}, {"i", "ib-port"}, {"g", "gid-idx"}, {"s", "size"},
		{"m", "mtu"}, {"r", "rx-depth"}, {"n", "iters"}, {"l", "sl"}, {"e", "events"}, {"c", "chk"},
		{"o", "odp"}, {"O", "iodp"}, {"P", "prefetch"}, {"N", "new_send"}, {"t", "ts"}, {"j", "dm"}, {"q", "num-qp"}} {
		alias(a[0], a[1])
	}
	pos, err := base.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := o.check1(pos); err != nil {
		return err
	}
	if ts || dm {
		return base.Usagef("pingpong: -t (timestamps) and -j (device memory) are not supported by xroce: leave them out")
	}
	if odp || iodp || prefetch {
		fmt.Fprintln(e.Stderr, "pingpong: -o/-O/-P (on-demand paging) ignored: xroce memory regions are always present")
	}
	return pingpong(ctx, e, &o)
}

// check1 validates the options and fills in the defaults that depend on
// the mode.
func (o *pingpongOptions) check1(pos []string) error {
	switch len(pos) {
	case 0:
	case 1:
		o.host = pos[0]
	default:
		return base.Usagef("pingpong: at most one HOST, got %d arguments; see 'xroce pingpong -h'", len(pos))
	}
	if o.ud && o.uc || o.srq && (o.ud || o.uc) {
		return base.Usagef("pingpong: one of --ud, --uc and --srq at most")
	}
	if o.srq && (o.numQP < 1 || o.numQP >= ppMaxQP) {
		return base.Usagef("pingpong: -q %d: want 1..%d QPs", o.numQP, ppMaxQP-1)
	}
	if o.size < 0 {
		o.size = 4096
		if o.ud {
			o.size = 2048
		}
	}
	switch {
	case o.port < 1 || o.port > 65535:
		return base.Usagef("pingpong: -p %d: want a TCP port 1..65535", o.port)
	case o.ibPort != 1:
		return base.Usagef("pingpong: -i %d: an xroce device has one port, 1", o.ibPort)
	case o.size < 1 || o.size > 1<<30:
		return base.Usagef("pingpong: -s %d: want 1..%d bytes", o.size, 1<<30)
	case o.rxDepth < 1 || o.rxDepth > 1<<15:
		return base.Usagef("pingpong: -r %d: want 1..32768", o.rxDepth)
	case o.iters < 1:
		return base.Usagef("pingpong: -n %d: want at least 1", o.iters)
	case o.gid < -1 || o.gid > 255:
		return base.Usagef("pingpong: -g %d: want a GID index 0..255", o.gid)
	case o.timeout <= 0:
		return base.Usagef("pingpong: -timeout %v: want a positive duration", o.timeout)
	}
	if device.MTUFromBytes(o.mtu) == 0 {
		return base.Usagef("pingpong: -m %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	}
	return nil
}

// ppSide is what one end of a pingpong holds.
type ppSide struct {
	o    *pingpongOptions
	dev  *roce.Device
	pd   *roce.PD
	cq   *roce.CQ
	qp   *roce.QP
	buf  []byte
	mr   *roce.MR
	av   *roce.AddressVector // UD: the peer
	rqpn uint32              // UD: the peer's QP
	wcs  [2]roce.WC
}

func pingpong(ctx context.Context, e *base.Env, o *pingpongOptions) error {
	if o.srq {
		return pingpongSRQ(ctx, e, o)
	}
	dev, err := device.OpenDevice(e.Stderr, o.dev, o.host, "pingpong")
	if err != nil {
		return err
	}
	defer dev.Close()
	s := &ppSide{o: o, dev: dev}
	if err := s.setup(); err != nil {
		return fmt.Errorf("pingpong: %w", err)
	}
	if o.ud && o.size > dev.Info().ActiveMTU.Bytes() {
		return fmt.Errorf("pingpong: requested size larger than port MTU (%d): use -s %d or less", dev.Info().ActiveMTU.Bytes(), dev.Info().ActiveMTU.Bytes())
	}
	if !o.ud && device.MTUFromBytes(o.mtu) > dev.Info().ActiveMTU {
		return fmt.Errorf("pingpong: -m %d is above the RoCE MTU of %s (%d bytes, from its MTU %d): use -m %d or raise the interface MTU",
			o.mtu, dev.Info().Name, dev.Info().ActiveMTU.Bytes(), dev.Info().MTU, dev.Info().ActiveMTU.Bytes())
	}
	opts := ppConnectOptions()
	local, err := device.LocalEndpoint(dev, s.qp, o.gid)
	if err != nil {
		return fmt.Errorf("pingpong: %w", err)
	}
	sep := ","
	if o.ud {
		sep = ":" // ud_pingpong's own spelling
	}
	fmt.Fprintf(e.Stdout, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", local.LID, local.QPN, local.PSN, sep, local.GID)
	remote, err := s.exchange(ctx, local, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", remote.LID, remote.QPN, remote.PSN, remote.GID)

	start := time.Now()
	if err := s.run(ctx); err != nil {
		return fmt.Errorf("pingpong: %w", err)
	}
	usec := float64(time.Since(start).Nanoseconds()) / 1e3
	bytes := int64(o.size) * int64(o.iters) * 2
	fmt.Fprintf(e.Stdout, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(e.Stdout, "%d iters in %.2f seconds = %.2f usec/iter\n", o.iters, usec/1e6, usec/float64(o.iters))
	if o.check {
		if bad := s.validate(); len(bad) > 0 {
			for _, p := range bad[:min(len(bad), 10)] {
				fmt.Fprintf(e.Stdout, "invalid data in page %d\n", p)
			}
			return fmt.Errorf("pingpong: -c: invalid data in %d of %d pages", len(bad), (o.size+ppPage-1)/ppPage)
		}
	}
	lingerAnswering(ctx, s.qp)
	return nil
}

// ppLingerFloor is the least time a pingpong side keeps its QPs answering
// after its run (answerLinger), for QPs whose ACK timeout is infinite.
const ppLingerFloor = 100 * time.Millisecond

// lingerAnswering keeps the device open for answerLinger after a pingpong
// run, so that the QPs still acknowledge the peer's retransmissions:
// each side's run ends when its own last work request completes, which
// says nothing of whether the ACK of the peer's last message arrived. The
// exchange ends with the TCP connection, so nothing tells this side when
// the peer is done; it waits the whole time, or until ctx ends.
func lingerAnswering(ctx context.Context, qps ...*roce.QP) {
	t := time.NewTimer(device.AnswerLinger(ppLingerFloor, time.Second, qps...))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// ppConnectOptions are rc_pingpong's attributes: max_rd_atomic and
// max_dest_rd_atomic 1, and hop limit 1 in the address vector.
func ppConnectOptions() roce.ConnectOptions {
	return roce.ConnectOptions{MaxRdAtomic: 1, MaxDestRdAtomic: 1, HopLimit: 1}
}

func (s *ppSide) setup() error {
	o := s.o
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	if s.cq, err = s.dev.CreateCQ(o.rxDepth + 1); err != nil {
		return err
	}
	typ := roce.RC
	n := o.size
	switch {
	case o.ud:
		typ, n = roce.UD, o.size+ppGRH
	case o.uc:
		typ = roce.UC
	}
	s.qp, err = s.pd.CreateQP(roce.QPConfig{Type: typ, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 1, MaxRecvWR: o.rxDepth, MaxSGE: 1})
	if err != nil {
		return err
	}
	s.buf = make([]byte, n)
	for i := range s.buf {
		s.buf[i] = 0x7b // as rdma-core's tools
	}
	s.mr, err = s.pd.RegMR(s.buf, roce.AccessLocalWrite)
	return err
}

func (s *ppSide) postRecv() error {
	return s.qp.PostRecv(&roce.RecvWR{ID: ppRecvWRID, SGL: []roce.SGE{s.mr.SGE(0, len(s.buf))}})
}

func (s *ppSide) postSend() error {
	wr := roce.SendWR{ID: ppSendWRID, Opcode: roce.WRSend, Flags: roce.SendSignaled}
	if s.o.ud {
		wr.SGL = []roce.SGE{s.mr.SGE(ppGRH, s.o.size)}
		wr.AV, wr.RemoteQPN, wr.RemoteQKey = s.av, s.rqpn, 0x11111111
	} else {
		wr.SGL = []roce.SGE{s.mr.SGE(0, s.o.size)}
	}
	return s.qp.PostSend(&wr)
}

// exchange runs rc_pingpong's TCP exchange and brings the QP to RTS: the
// client sends its address, the server answers with its own once its QP is
// ready, and the client says "done" once its QP is.
func (s *ppSide) exchange(ctx context.Context, local roce.Endpoint, opts roce.ConnectOptions) (roce.Endpoint, error) {
	o := s.o
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	conn, err := device.Dial(ctx, o.host, o.port, "pingpong")
	if err != nil {
		return roce.Endpoint{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	codec := roce.PingpongCodec
	msg := make([]byte, codec.Size())
	codec.Marshal(msg, local)
	peer := conn.RemoteAddr().String()
	fail := func(what string, err error) (roce.Endpoint, error) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("the peer closed the connection")
		}
		return roce.Endpoint{}, fmt.Errorf("pingpong: %s %s: %w (is the peer an ibv_rc_pingpong of the same kind, RC or --ud?)", what, peer, device.UnwrapOp(err))
	}
	connect := func(remote roce.Endpoint) error {
		if remote.GID.IsUnspecified() {
			return fmt.Errorf("pingpong: the peer at %s sent no GID: give it one with -g (ibv_rc_pingpong's default, none, works on InfiniBand only; -g 1 is usually its IPv4 GID)", peer)
		}
		if !o.ud {
			remote.MTU = device.MTUFromBytes(o.mtu)
		}
		if err := s.qp.Connect(ctx, local, remote, opts); err != nil {
			return fmt.Errorf("pingpong: cannot connect the QP to %v: %w", remote.GID, err)
		}
		// Receives can be posted from INIT on; Connect goes from RESET
		// to RTS at once, so post them now, before this side answers
		// (server) or says "done" (client): the peer sends only then.
		for range o.rxDepth {
			if err := s.postRecv(); err != nil {
				return fmt.Errorf("pingpong: couldn't post receive: %w", err)
			}
		}
		if o.ud {
			av, err := s.dev.Resolve(ctx, remote.GID)
			if err != nil {
				return fmt.Errorf("pingpong: cannot reach %v: %w", remote.GID, err)
			}
			av.HopLimit = opts.HopLimit // ud_pingpong's address handle: hop limit 1
			s.av, s.rqpn = &av, remote.QPN
		}
		return nil
	}
	if o.host != "" {
		if _, err := conn.Write(msg); err != nil {
			return fail("couldn't send local address to", err)
		}
		if _, err := io.ReadFull(conn, msg); err != nil {
			return fail("couldn't read remote address from", err)
		}
		remote, err := codec.Unmarshal(msg)
		if err != nil {
			return fail("bad address from", err)
		}
		if err := connect(remote); err != nil {
			return remote, err
		}
		if _, err := conn.Write([]byte("done\x00")); err != nil {
			return fail("couldn't send \"done\" to", err)
		}
		return remote, nil
	}
	in := make([]byte, codec.Size())
	if _, err := io.ReadFull(conn, in); err != nil {
		return fail("couldn't read remote address from", err)
	}
	remote, err := codec.Unmarshal(in)
	if err != nil {
		return fail("bad address from", err)
	}
	if err := connect(remote); err != nil {
		return remote, err
	}
	if _, err := conn.Write(msg); err != nil {
		return fail("couldn't send local address to", err)
	}
	// The client writes "done" with its NUL (5 bytes); accept 4.
	done := make([]byte, 5)
	n, err := io.ReadAtLeast(conn, done, 4)
	if err != nil || string(done[:4]) != "done" {
		return fail("no \"done\" from", errors.Join(err, fmt.Errorf("got %q", done[:n])))
	}
	return remote, nil
}

// run is rc_pingpong's loop: each side keeps the receive queue full and
// sends the next message once its previous send and the peer's answer have
// both completed.
func (s *ppSide) run(ctx context.Context) error {
	o := s.o
	if o.check {
		s.fill()
	}
	pending := ppRecvWRID
	if o.host != "" {
		if err := s.postSend(); err != nil {
			return fmt.Errorf("couldn't post send: %w", err)
		}
		pending |= ppSendWRID
	}
	routs := o.rxDepth
	scnt, rcnt := 0, 0
	for rcnt < o.iters || scnt < o.iters {
		n, err := s.poll(ctx)
		if err != nil {
			return fmt.Errorf("after %d sends and %d receives: %w", scnt, rcnt, err)
		}
		for _, wc := range s.wcs[:n] {
			if wc.Status != roce.WCSuccess {
				return fmt.Errorf("failed status %v (%d) for wr_id %d", wc.Status, int(wc.Status), wc.ID)
			}
			switch wc.ID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				routs--
				if routs <= 1 {
					for ; routs < o.rxDepth; routs++ {
						if err := s.postRecv(); err != nil {
							return fmt.Errorf("couldn't post receive: %w", err)
						}
					}
				}
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", wc.ID)
			}
			pending &^= int(wc.ID)
			if scnt < o.iters && pending == 0 {
				if err := s.postSend(); err != nil {
					return fmt.Errorf("couldn't post send: %w", err)
				}
				pending = ppRecvWRID | ppSendWRID
			}
		}
	}
	return nil
}

// poll returns completions: busy polling, or with -e sleeping on the CQ's
// notification; either way it gives up after the timeout.
func (s *ppSide) poll(ctx context.Context) (int, error) {
	if n := s.cq.Poll(s.wcs[:]); n > 0 {
		return n, nil
	}
	deadline := time.Now().Add(s.o.timeout)
	if s.o.events {
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		for {
			if err := s.cq.Wait(ctx); err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return 0, fmt.Errorf("no completion for %v: the peer is gone?", s.o.timeout)
				}
				return 0, err
			}
			if n := s.cq.Poll(s.wcs[:]); n > 0 {
				return n, nil
			}
		}
	}
	return device.PollCQ(ctx, s.cq, s.wcs[:], deadline, s.o.timeout)
}

// data returns the message area of the buffer.
func (s *ppSide) data() []byte {
	if s.o.ud {
		return s.buf[ppGRH : ppGRH+s.o.size]
	}
	return s.buf[:s.o.size]
}

// ppPattern is the byte at offset i of a message with -c: 0 at the start
// of each page, as rc_pingpong writes (and checks), something else between.
func ppPattern(i int) byte {
	if i%ppPage == 0 {
		return 0
	}
	return byte(i*7+i/ppPage) | 1
}

// fill writes the -c pattern (the client only: the server echoes what it
// received).
func (s *ppSide) fill() {
	if s.o.host == "" {
		return
	}
	for i, b := 0, s.data(); i < len(b); i++ {
		b[i] = ppPattern(i)
	}
}

// validate returns the pages of the last message that hold wrong data:
// the first byte of each page must be 0 (rc_pingpong's check); the others
// must all be xroce's pattern or all rdma-core's 0x7b fill.
func (s *ppSide) validate() []int {
	b := s.data()
	var bad []int
	for p := 0; p*ppPage < len(b); p++ {
		page := b[p*ppPage : min(len(b), (p+1)*ppPage)]
		ok := page[0] == 0
		ours, theirs := true, true
		for i := 1; i < len(page) && ok; i++ {
			ours = ours && page[i] == ppPattern(p*ppPage+i)
			theirs = theirs && page[i] == 0x7b
			ok = ours || theirs
		}
		if !ok {
			bad = append(bad, p)
		}
	}
	return bad
}
