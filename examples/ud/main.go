// Command ud shows unreliable datagrams: the client sends datagrams to the
// server's UD QP, naming its address, QP number and Q_Key in each request;
// received buffers start with a 40-byte GRH area.
//
//	server$ ud -dev eth0
//	client$ ud -dev eth0 -peer 198.18.0.2
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
		fmt.Fprintln(os.Stderr, "ud:", err)
		os.Exit(1)
	}
}

const (
	grh  = 40
	slot = grh + 1024
)

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ud", flag.ContinueOnError)
	o := exconn.Flags(fs, roce.UD, 16*slot)
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
		for i := range 16 {
			if err := s.QP.PostRecv(&roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{s.MR.SGE(i*slot, slot)}}); err != nil {
				return err
			}
		}
		if err := s.Done(); err != nil {
			return err
		}
		for range 3 {
			wc, err := s.Wait(ctx)
			if err != nil {
				return err
			}
			msg := s.Buf[int(wc.ID)*slot+grh:][:wc.ByteLen-grh]
			fmt.Fprintf(out, "server: datagram from QP %#x: %q\n", wc.SrcQP, msg)
		}
		return nil
	}
	if err := s.WaitDone(ctx); err != nil {
		return err
	}
	for i := range 3 {
		l := copy(s.Buf[i*slot:], fmt.Sprintf("datagram %d", i))
		err := s.QP.PostSend(&roce.SendWR{ID: uint64(i), Opcode: roce.WRSend, Flags: roce.SendSignaled,
			SGL: []roce.SGE{s.MR.SGE(i*slot, l)}, AV: &s.AV, RemoteQPN: s.Remote.QPN, RemoteQKey: s.Remote.QKey})
		if err != nil {
			return err
		}
		if _, err := s.Wait(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "client: sent 3 datagrams")
	return nil
}
