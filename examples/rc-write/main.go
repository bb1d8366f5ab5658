// Command rc-write shows an RDMA WRITE with immediate: the client writes a
// message straight into the server's buffer; the immediate data tells the
// server it arrived.
//
//	server$ rc-write -dev eth0
//	client$ rc-write -dev eth0 -peer 198.18.0.2
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/xroce/xroce/examples/exconn"
	"github.com/xroce/xroce/roce"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rc-write:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rc-write", flag.ContinueOnError)
	o := exconn.Flags(fs, roce.RC, 4096)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := exconn.Start(ctx, o)
	if err != nil {
		return err
	}
	defer s.Close()
	if s.Server {
		// WRITE_WITH_IMM consumes a receive request.
		if err := s.QP.PostRecv(&roce.RecvWR{ID: 1}); err != nil {
			return err
		}
		if err := s.Done(); err != nil { // ready
			return err
		}
		wc, err := s.Wait(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "server: %d bytes written, immediate %#x: %q\n", wc.ByteLen, wc.Imm, s.Buf[:wc.ByteLen])
		return nil
	}
	if err := s.WaitDone(ctx); err != nil {
		return err
	}
	n := copy(s.Buf, "hello from an RDMA WRITE")
	err = s.QP.PostSend(&roce.SendWR{Opcode: roce.WRRDMAWriteWithImm, Flags: roce.SendSignaled, Imm: 0x1234,
		SGL: []roce.SGE{s.MR.SGE(0, n)}, RemoteAddr: s.Remote.Addr, RKey: s.Remote.RKey})
	if err != nil {
		return err
	}
	if _, err := s.Wait(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "client: wrote %d bytes to %#x\n", n, s.Remote.Addr)
	return nil
}
