package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/roce"
)

// Config configures connections. The zero value gives the defaults.
type Config struct {
	// RingSize is the receive ring in bytes; 0 means 1 MiB. 4 KiB to
	// 2 MiB.
	RingSize int
	// Linger bounds how long Close and CloseWrite wait for credits and
	// acknowledgements; 0 means 5 s.
	Linger time.Duration
	// DirectThreshold is the smallest Read that may be filled directly: a
	// Read of at least this many bytes that finds nothing queued
	// advertises its buffer for the writer to fill with RDMA WRITE (see
	// the package doc). 0 (or less) means off, the default: everything
	// goes through the ring and no Read buffer is registered, so no
	// caller memory is exposed to the peer. Each direct Write waits for
	// its completion and the next advert, which costs about what the
	// saved copy gains (the stream benchmarks of docs/benchmarks.md).
	DirectThreshold int
	// ReadSpin is how long a Read that finds nothing to read polls the
	// connection's CQ before it sleeps, doing the device's receive work
	// in its own goroutine (roce.CQ.Progress): lower latency for
	// request-response traffic when a core is free to spin, at the cost
	// of that core while it waits. 0 means no spinning. A spin shorter
	// than the round trip only adds work; the stream benchmarks of
	// docs/benchmarks.md give figures.
	ReadSpin time.Duration
	// HandshakeTimeout bounds Accept's setup of one connection; 0 means
	// 10 s. Dial is bounded by its context.
	HandshakeTimeout time.Duration
	// Connect are the QP attributes; zero means Timeout 14 (67 ms) and
	// RetryCnt 6, so that a vanished peer is seen in about half a second.
	Connect roce.ConnectOptions
	// Protocol is what DialCM speaks: xroce's own (the default) or
	// rsocket's, to reach rstream, rcopy or a program under
	// librspreload.so. ListenCM accepts both, telling them apart by the
	// connect data; Dial and Listen (the TCP side channel) speak only
	// xroce's.
	Protocol Protocol
	// Keepalive is, for rsocket connections, how often a keepalive (a
	// zero-length RDMA WRITE that the peer's RC layer acknowledges) is
	// sent, as rsocket's SO_KEEPALIVE with TCP_KEEPIDLE: a peer that
	// vanished is then seen within Keepalive and the RC retries even
	// while nothing else is sent. 0 means none, rsocket's default.
	Keepalive time.Duration

	// rsSwapOrder asks rsocket peers for SGL updates in the byte order
	// other than this host's (tests: both orders of the peer).
	rsSwapOrder bool
}

// ErrBadHello is wrapped by setup errors when the peer does not speak
// this protocol.
var ErrBadHello = errors.New("stream: bad hello on the side channel")

func (c Config) withDefaults() (Config, error) {
	if c.RingSize == 0 {
		c.RingSize = 1 << 20
	}
	if c.Linger == 0 {
		c.Linger = 5 * time.Second
	}
	c.DirectThreshold = max(c.DirectThreshold, 0)
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.Connect.Timeout == 0 {
		c.Connect.Timeout = 14
	}
	if c.Connect.RetryCnt == 0 {
		c.Connect.RetryCnt = 6
	}
	if c.RingSize < 4<<10 || c.RingSize > 2<<20 {
		return c, fmt.Errorf("stream: ring size %d out of range 4 KiB..2 MiB", c.RingSize)
	}
	return c, nil
}

// Dial connects to a Listener at addr (its TCP side channel) with the
// default Config.
func Dial(ctx context.Context, d *roce.Device, addr string) (*Conn, error) {
	return Config{}.Dial(ctx, d, addr)
}

// Dial connects to a Listener at addr (its TCP side channel).
func (cfg Config) Dial(ctx context.Context, d *roce.Device, addr string) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Protocol != ProtocolXroce {
		return nil, fmt.Errorf("stream: %v streams connect over RDMA CM (DialCM), not a TCP side channel", cfg.Protocol)
	}
	var nd net.Dialer
	tc, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "xroce", Err: err}
	}
	defer tc.Close()
	c, err := setup(ctx, d, tc, true, cfg)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "xroce", Addr: tc.RemoteAddr(), Err: err}
	}
	return c, nil
}

// Listener accepts stream connections; it implements net.Listener. Its
// methods are safe for concurrent use. Side channels are set up
// concurrently (each within Config.HandshakeTimeout), so a slow client does
// not hold up the others.
type Listener struct {
	d     *roce.Device
	cfg   Config
	ln    net.Listener // the TCP side channel's, or
	cml   *cm.Listener // RDMA CM's (ListenCM)
	conns chan *Conn
	done  chan struct{} // closed by Close
	once  sync.Once

	// mu guards err, the TCP listener's failure; failed is closed then.
	mu     sync.Mutex
	err    error
	failed chan struct{}
}

// Listen listens on the TCP address addr for side channels, with the
// default Config.
func Listen(d *roce.Device, addr string) (*Listener, error) {
	return Config{}.Listen(d, addr)
}

// Listen listens on the TCP address addr for side channels.
func (cfg Config) Listen(d *roce.Device, addr string) (*Listener, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{d: d, cfg: cfg, ln: ln, conns: make(chan *Conn), done: make(chan struct{}), failed: make(chan struct{})}
	go l.loop()
	return l, nil
}

// loop accepts side channels and sets each up on its own goroutine.
func (l *Listener) loop() {
	for {
		tc, err := l.ln.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			close(l.failed)
			return
		}
		go func() {
			defer tc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.HandshakeTimeout)
			defer cancel()
			c, err := setup(ctx, l.d, tc, false, l.cfg)
			if err != nil {
				return // a failed setup is dropped
			}
			select {
			case l.conns <- c:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

// Accept waits for a connection that is set up. After Close it returns an
// error wrapping net.ErrClosed; a failure of the TCP listener is returned
// as is.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "xroce", Addr: l.Addr(), Err: net.ErrClosed}
	case <-l.failed:
		select {
		case <-l.done:
			return nil, &net.OpError{Op: "accept", Net: "xroce", Addr: l.Addr(), Err: net.ErrClosed}
		default:
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// Close stops listening; established connections stay, connections still
// being set up are closed.
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.once.Do(func() {
		close(l.done)
		if l.cml != nil {
			err = l.cml.Close()
			return
		}
		err = l.ln.Close()
	})
	return err
}

// Addr is the side channel's TCP address, or the RDMA CM listener's.
func (l *Listener) Addr() net.Addr {
	if l.cml != nil {
		a := l.cml.Addr()
		return Addr{IP: a.Addr(), Port: int(a.Port())}
	}
	return l.ln.Addr()
}

// setup runs the side channel's exchange on tc and returns a connected
// Conn; see the package doc.
func setup(ctx context.Context, d *roce.Device, tc net.Conn, client bool, cfg Config) (_ *Conn, err error) {
	if dl, ok := ctx.Deadline(); ok {
		tc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var hello, peer [8]byte
	copy(hello[:], "XRS1")
	binary.BigEndian.PutUint32(hello[4:], uint32(cfg.RingSize))
	// The client speaks first, so that an unbuffered side channel works.
	if err := exchange(tc, client, hello[:], peer[:]); err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	peerRing := int(binary.BigEndian.Uint32(peer[4:]))
	if string(peer[:4]) != "XRS1" || peerRing < 4<<10 || peerRing > 2<<20 {
		return nil, fmt.Errorf("%w: %q", ErrBadHello, peer[:])
	}

	c, err := newConn(d, cfg, peerRing)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	opts := cfg.Connect
	opts.Access = roce.AccessLocalWrite | roce.AccessRemoteWrite
	local, err := c.qp.LocalEndpoint(rand.Uint32(), opts)
	if err != nil {
		return nil, err
	}
	local.RKey, local.Addr = c.ringMR.RKey(), c.ringMR.Addr()
	remote, err := c.qp.ConnectTCP(ctx, tc, client, local, roce.XroceCodec, opts)
	if err != nil {
		return nil, err
	}
	for i := range recvDepth {
		if err := c.postRecv(i); err != nil {
			return nil, err
		}
	}
	// Both sides' receive requests are posted once each has read the
	// other's 'R'.
	if err := exchange(tc, client, []byte{'R'}, peer[:1]); err != nil || peer[0] != 'R' {
		return nil, fmt.Errorf("ready: %w", errors.Join(err, ErrBadHello))
	}
	c.peerAddr, c.peerKey = remote.Addr, remote.RKey
	port := func(a net.Addr) int {
		if t, ok := a.(*net.TCPAddr); ok {
			return t.Port
		}
		return 0
	}
	c.laddr = Addr{IP: local.GID.Unmap(), Port: port(tc.LocalAddr()), QPN: local.QPN}
	c.raddr = Addr{IP: remote.GID.Unmap(), Port: port(tc.RemoteAddr()), QPN: remote.QPN}
	c.start()
	return c, nil
}

// newConn makes a connection's verbs resources: PD, CQ, ring and staging
// buffers, control slots and the RC QP, in RESET. The staging buffer is as
// large as the peer's ring: peerRing 0 leaves it to setPeerRing.
func newConn(d *roce.Device, cfg Config, peerRing int) (_ *Conn, err error) {
	c := &Conn{cfg: cfg, ring: make([]byte, cfg.RingSize),
		rctl: make([]byte, recvDepth*slotSize), sctl: make([]byte, sendDepth*slotSize), released: make(chan struct{})}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.pd, err = d.AllocPD(); err != nil {
		return nil, err
	}
	if c.cq, err = d.CreateCQ(recvDepth + sendDepth); err != nil {
		return nil, err
	}
	if c.ringMR, err = c.pd.RegMR(c.ring, roce.AccessLocalWrite|roce.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if peerRing > 0 {
		if err = c.setPeerRing(peerRing); err != nil {
			return nil, err
		}
	}
	if c.rctlMR, err = c.pd.RegMR(c.rctl, roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.sctlMR, err = c.pd.RegMR(c.sctl, roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	c.qp, err = c.pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: c.cq, RecvCQ: c.cq,
		MaxSendWR: sendDepth, MaxRecvWR: recvDepth, MaxSGE: 1, MaxInline: 0, SignalAll: true})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// setPeerRing makes the staging buffer for a peer ring of n bytes.
func (c *Conn) setPeerRing(n int) (err error) {
	c.stage = make([]byte, n)
	c.stageMR, err = c.pd.RegMR(c.stage, roce.AccessLocalWrite)
	return err
}

// exchange sends out and reads in, the client first.
func exchange(tc net.Conn, client bool, out, in []byte) error {
	if client {
		if _, err := tc.Write(out); err != nil {
			return err
		}
	}
	if _, err := io.ReadFull(tc, in); err != nil {
		return err
	}
	if !client {
		if _, err := tc.Write(out); err != nil {
			return err
		}
	}
	return nil
}
