package stream

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/roce"
)

// cmHelloSize is the hello carried in the private data of the REQ and the
// REP when a stream connects over RDMA CM: "XRS1", the ring size
// (big-endian uint32), the ring's address (uint64) and R_Key (uint32).
const cmHelloSize = 20

func putCMHello(b []byte, c *Conn) {
	copy(b, "XRS1")
	binary.BigEndian.PutUint32(b[4:], uint32(len(c.ring)))
	binary.BigEndian.PutUint64(b[8:], c.ringMR.Addr())
	binary.BigEndian.PutUint32(b[16:], c.ringMR.RKey())
}

func parseCMHello(b []byte) (ring int, addr uint64, rkey uint32, err error) {
	if len(b) < cmHelloSize || string(b[:4]) != "XRS1" {
		return 0, 0, 0, fmt.Errorf("%w: %q", ErrBadHello, b[:min(len(b), 8)])
	}
	ring = int(binary.BigEndian.Uint32(b[4:]))
	if ring < 4<<10 || ring > 2<<20 {
		return 0, 0, 0, fmt.Errorf("%w: ring of %d bytes", ErrBadHello, ring)
	}
	return ring, binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint32(b[16:]), nil
}

// cmParam are the connection parameters of a stream over RDMA CM: no READs
// either way, the ACK time-out and retry count of Config.Connect, and RNR
// retries for ever (credits keep RNR NAKs away in steady state).
func cmParam(cfg Config, hello []byte) *cm.ConnParam {
	return &cm.ConnParam{RetryCount: uint8(cfg.Connect.RetryCnt), RNRRetryCount: 7, MinRNRTimer: 12,
		ACKTimeout: uint8(cfg.Connect.Timeout), PrivateData: hello}
}

// DialCM connects to a ListenCM listener at addr over RDMA CM with the
// default Config: no side channel; the hello, the ring's address and key
// travel in the CM's private data.
func DialCM(ctx context.Context, a *cm.Agent, addr netip.AddrPort) (*Conn, error) {
	return Config{}.DialCM(ctx, a, addr)
}

// DialCM connects to a ListenCM listener at addr over RDMA CM.
func (cfg Config) DialCM(ctx context.Context, a *cm.Agent, addr netip.AddrPort) (_ *Conn, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	fail := func(err error) error {
		return &net.OpError{Op: "dial", Net: "xroce", Addr: Addr{IP: addr.Addr(), Port: int(addr.Port())}, Err: err}
	}
	if cfg.Protocol == ProtocolRsocket {
		c, err := cfg.dialRS(ctx, a, addr)
		if err != nil {
			return nil, fail(err)
		}
		return c, nil
	}
	c, err := newConn(a.Device(), cfg, 0)
	if err != nil {
		return nil, fail(err)
	}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if err := c.prepareCM(); err != nil {
		return nil, fail(err)
	}
	var hello [cmHelloSize]byte
	putCMHello(hello[:], c)
	cc, err := a.Dial(ctx, addr, c.qp, &cm.DialOptions{Param: cmParam(cfg, hello[:])})
	if err != nil {
		return nil, fail(err)
	}
	c.cmc = cc
	ring, paddr, pkey, err := parseCMHello(cc.PrivateData())
	if err != nil {
		return nil, fail(err)
	}
	if err := c.setPeerRing(ring); err != nil {
		return nil, fail(err)
	}
	c.startCM(cc, paddr, pkey)
	return c, nil
}

// ListenCM listens for streams over RDMA CM on addr's port (and address,
// unless unspecified) with the default Config.
func ListenCM(a *cm.Agent, addr netip.AddrPort) (*Listener, error) {
	return Config{}.ListenCM(a, addr)
}

// ListenCM listens for streams over RDMA CM on addr's port.
func (cfg Config) ListenCM(a *cm.Agent, addr netip.AddrPort) (*Listener, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cl, err := a.Listen(addr, nil)
	if err != nil {
		return nil, err
	}
	l := &Listener{d: a.Device(), cfg: cfg, cml: cl, conns: make(chan *Conn), done: make(chan struct{}), failed: make(chan struct{})}
	go l.cmLoop()
	return l, nil
}

// cmLoop takes connection requests and sets each up on its own goroutine.
func (l *Listener) cmLoop() {
	for {
		req, err := l.cml.Accept(context.Background())
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			close(l.failed)
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.HandshakeTimeout)
			defer cancel()
			c, err := acceptCM(ctx, l.d, req, l.cfg)
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

// acceptCM sets up the passive side of a stream over RDMA CM, in the
// protocol the connect data names: rsocket's begins with its version (1),
// xroce's with "XRS1".
func acceptCM(ctx context.Context, d *roce.Device, req *cm.Request, cfg Config) (_ *Conn, err error) {
	if pd := req.Param.PrivateData; len(pd) > 0 && pd[0] == rsVersion {
		peer, err := parseRSConnData(pd)
		if err != nil {
			req.Reject(nil)
			return nil, err
		}
		return acceptRS(ctx, d, req, peer, cfg)
	}
	ring, paddr, pkey, err := parseCMHello(req.Param.PrivateData)
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	c, err := newConn(d, cfg, ring)
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if err := c.prepareCM(); err != nil {
		req.Reject(nil)
		return nil, err
	}
	var hello [cmHelloSize]byte
	putCMHello(hello[:], c)
	cc, err := req.Accept(ctx, c.qp, cmParam(cfg, hello[:]))
	if err != nil {
		return nil, err
	}
	c.cmc = cc
	c.startCM(cc, paddr, pkey)
	return c, nil
}

// prepareCM moves the QP to INIT and posts its receive requests, before
// the connection exists, as rdma_cm programs do.
func (c *Conn) prepareCM() error {
	if err := cm.PrepareQP(c.qp); err != nil {
		return err
	}
	for i := range recvDepth {
		if err := c.postRecv(i); err != nil {
			return err
		}
	}
	return nil
}

// startCM records the peer's ring and the addresses, and starts the pump.
func (c *Conn) startCM(cc *cm.Conn, paddr uint64, pkey uint32) {
	c.peerAddr, c.peerKey = paddr, pkey
	la, ra := cc.LocalAddr(), cc.RemoteAddr()
	c.laddr = Addr{IP: la.Addr(), Port: int(la.Port()), QPN: c.qp.QPN()}
	c.raddr = Addr{IP: ra.Addr(), Port: int(ra.Port())}
	if a, err := c.qp.Query(); err == nil {
		c.raddr.QPN = a.DestQPN
	}
	c.start()
}
