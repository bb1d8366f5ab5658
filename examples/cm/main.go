// Command cm shows RDMA CM, the way nearly every RDMA program connects:
// the server listens on an rdma_cm port (7471, rdma_server's), the client
// dials it with private data, the server accepts with its own; the QPs
// come up as the kernel's rdma_cm would bring them up, and the client
// SENDs a message, then disconnects.
//
//	server$ cm -dev eth0
//	client$ cm -dev eth0 -peer 198.18.0.2
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/mad"
	"github.com/xroce/xroce/nic"
	"github.com/xroce/xroce/roce"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cm:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("cm", flag.ContinueOnError)
	dev := fs.String("dev", "", "network interface to run RoCE on (required)")
	peer := fs.String("peer", "", "server IP address to connect to; without it, wait for a client")
	port := fs.Uint("port", 7471, "rdma_cm port (TCP port space)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dev == "" {
		return errors.New("-dev is required")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	// A device, its connection manager (QP 1), and an RC QP with a buffer.
	d, err := nic.Open(*dev, nic.Config{})
	if err != nil {
		return err
	}
	if err := d.Fallback(); err != nil {
		fmt.Fprintf(os.Stderr, "cm: %s: AF_XDP not available (%v); using AF_PACKET\n", *dev, err)
	}
	defer d.Close()
	agent, err := cm.Open(d.Device, cm.AgentConfig{})
	if err != nil {
		return err
	}
	defer agent.Close()
	pd, err := d.AllocPD()
	if err != nil {
		return err
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		return err
	}
	q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
	if err != nil {
		return err
	}
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, roce.AccessLocalWrite)
	if err != nil {
		return err
	}
	// As rdma_create_qp: INIT, so the receive can be posted first.
	if err := cm.PrepareQP(q); err != nil {
		return err
	}
	wait := func() (roce.WC, error) {
		var wc [1]roce.WC
		for cq.Poll(wc[:]) == 0 {
			if err := cq.Wait(ctx); err != nil {
				return wc[0], err
			}
		}
		if wc[0].Status != roce.WCSuccess {
			return wc[0], fmt.Errorf("completion %v", wc[0].Status)
		}
		return wc[0], nil
	}

	if *peer == "" {
		l, err := agent.Listen(netip.AddrPortFrom(netip.Addr{}, uint16(*port)), nil)
		if err != nil {
			return err
		}
		defer l.Close()
		if err := q.PostRecv(&roce.RecvWR{ID: 1, SGL: []roce.SGE{mr.SGE(0, len(buf))}}); err != nil {
			return err
		}
		req, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "server: request from %v, QP %#x, private data %q\n", req.Remote, req.QPN(), cString(req.Param.PrivateData))
		c, err := req.Accept(ctx, q, &cm.ConnParam{RetryCount: 7, RNRRetryCount: 7, PrivateData: []byte("welcome")})
		if err != nil {
			return err
		}
		wc, err := wait()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "server: received %q\n", buf[:wc.ByteLen])
		<-c.Done() // the client disconnects
		fmt.Fprintf(out, "server: %v\n", c.Err())
		return nil
	}

	ip, err := netip.ParseAddr(*peer)
	if err != nil {
		return err
	}
	var c *cm.Conn
	for {
		c, err = agent.Dial(ctx, netip.AddrPortFrom(ip, uint16(*port)), q, &cm.DialOptions{
			Param: &cm.ConnParam{RetryCount: 7, RNRRetryCount: 7, PrivateData: []byte("hello")}})
		var rej *cm.RejectError
		if errors.As(err, &rej) && rej.Reason == mad.RejInvalidServiceID && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond) // not listening yet
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	fmt.Fprintf(out, "client: connected to %v, private data %q\n", c.RemoteAddr(), cString(c.PrivateData()))
	n := copy(buf, "hello over rdma_cm")
	if err := q.PostSend(&roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.SendSignaled, SGL: []roce.SGE{mr.SGE(0, n)}}); err != nil {
		return err
	}
	if _, err := wait(); err != nil {
		return err
	}
	fmt.Fprintln(out, "client: sent, disconnecting")
	return c.Disconnect(ctx)
}

// cString is b up to its first zero byte (private data is zero-padded).
func cString(b []byte) []byte {
	for i, x := range b {
		if x == 0 {
			return b[:i]
		}
	}
	return b
}
