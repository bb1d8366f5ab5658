// Package exconn is the setup the xroce examples share: open a RoCE device
// on an interface, make a QP with a registered buffer and connect it to the
// peer's over TCP (the server listens, the client dials -peer).
package exconn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/xroce/xroce/nic"
	"github.com/xroce/xroce/roce"
)

// Options are the examples' common flags.
type Options struct {
	Dev  string // network interface
	Peer string // server's IP address; empty: be the server
	Port int    // TCP port of the exchange
	Type roce.QPType
	Size int // buffer size
}

// Flags registers -dev, -peer and -port on fs.
func Flags(fs *flag.FlagSet, typ roce.QPType, size int) *Options {
	o := &Options{Type: typ, Size: size}
	fs.StringVar(&o.Dev, "dev", "", "network interface to run RoCE on (required)")
	fs.StringVar(&o.Peer, "peer", "", "server IP address to connect to; without it, wait for a client")
	fs.IntVar(&o.Port, "port", 18515, "TCP port for the connection setup")
	return o
}

// Session is a connected QP with its buffer.
type Session struct {
	Dev    *roce.Device
	PD     *roce.PD
	CQ     *roce.CQ
	QP     *roce.QP
	MR     *roce.MR
	Buf    []byte
	Remote roce.Endpoint      // the peer's QPN, PSN, GID, rkey and buffer address
	AV     roce.AddressVector // UD: the peer's address vector
	Server bool
	conn   net.Conn
}

// Start opens the device, creates the QP and buffer and connects to the
// peer. It must run in the interface's network namespace.
func Start(ctx context.Context, o *Options) (_ *Session, err error) {
	if o.Dev == "" {
		return nil, errors.New("no -dev given")
	}
	s := &Session{Server: o.Peer == ""}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	d, err := nic.Open(o.Dev, nic.Config{})
	if err != nil {
		return nil, err
	}
	s.Dev = d.Device
	if err := d.Fallback(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: AF_XDP not available (%v); using AF_PACKET\n", o.Dev, err)
	}
	if s.PD, err = s.Dev.AllocPD(); err != nil {
		return nil, err
	}
	if s.CQ, err = s.Dev.CreateCQ(256); err != nil {
		return nil, err
	}
	if s.QP, err = s.PD.CreateQP(roce.QPConfig{Type: o.Type, SendCQ: s.CQ, RecvCQ: s.CQ}); err != nil {
		return nil, err
	}
	s.Buf = make([]byte, o.Size)
	access := roce.AccessLocalWrite
	if o.Type == roce.RC {
		access |= roce.AccessRemoteRead | roce.AccessRemoteWrite | roce.AccessRemoteAtomic
	}
	if s.MR, err = s.PD.RegMR(s.Buf, access); err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(o.Peer, strconv.Itoa(o.Port))
	if s.Server {
		var ln net.Listener
		if ln, err = net.Listen("tcp", ":"+strconv.Itoa(o.Port)); err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		s.conn, err = ln.Accept()
		stop()
		ln.Close()
	} else {
		for { // the server may not listen yet
			var d net.Dialer
			if s.conn, err = d.DialContext(ctx, "tcp", addr); err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err != nil {
		return nil, err
	}
	local, err := s.QP.LocalEndpoint(uint32(time.Now().UnixNano()), roce.ConnectOptions{})
	if err != nil {
		return nil, err
	}
	local.RKey, local.Addr, local.QKey = s.MR.RKey(), s.MR.Addr(), 0x11111111
	if s.Remote, err = s.QP.ConnectTCP(ctx, s.conn, !s.Server, local, roce.XroceCodec, roce.ConnectOptions{}); err != nil {
		return nil, err
	}
	if o.Type == roce.UD {
		gid := s.Remote.GID
		if s.AV, err = s.Dev.Resolve(ctx, gid); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Wait waits for the next completion and fails unless it succeeded.
func (s *Session) Wait(ctx context.Context) (roce.WC, error) {
	var wc [1]roce.WC
	for s.CQ.Poll(wc[:]) == 0 {
		if err := s.CQ.Wait(ctx); err != nil {
			return roce.WC{}, err
		}
	}
	if wc[0].Status != roce.WCSuccess {
		return wc[0], fmt.Errorf("%v completion: %v", wc[0].Opcode, wc[0].Status)
	}
	return wc[0], nil
}

// Done tells the peer that this side is finished (client).
func (s *Session) Done() error {
	_, err := s.conn.Write([]byte("bye\n"))
	return err
}

// WaitDone waits until the peer is finished (server).
func (s *Session) WaitDone(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	b := make([]byte, 4)
	_, err := io.ReadFull(s.conn, b)
	return err
}

// PeerIP returns the peer's IP address.
func (s *Session) PeerIP() netip.Addr { return s.Remote.GID.Unmap() }

// Close releases everything.
func (s *Session) Close() {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.Dev != nil {
		s.Dev.Close()
	}
}
