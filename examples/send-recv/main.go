// Command send-recv shows two-sided messaging: the client SENDs messages,
// the server receives them into the buffers it posted.
//
//	server$ send-recv -dev eth0
//	client$ send-recv -dev eth0 -peer 198.18.0.2 -n 5
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
		fmt.Fprintln(os.Stderr, "send-recv:", err)
		os.Exit(1)
	}
}

const slot = 256 // bytes per message buffer

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("send-recv", flag.ContinueOnError)
	o := exconn.Flags(fs, roce.RC, 64*slot)
	n := fs.Int("n", 3, "messages to send (at most 64)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	*n = min(max(*n, 1), 64)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := exconn.Start(ctx, o)
	if err != nil {
		return err
	}
	defer s.Close()
	if s.Server {
		for i := range 64 {
			if err := s.QP.PostRecv(&roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{s.MR.SGE(i*slot, slot)}}); err != nil {
				return err
			}
		}
		if err := s.Done(); err != nil { // receives posted
			return err
		}
		for {
			wc, err := s.Wait(ctx)
			if err != nil {
				return err
			}
			msg := s.Buf[int(wc.ID)*slot:][:wc.ByteLen]
			fmt.Fprintf(out, "server: received %q\n", msg)
			if string(msg) == "bye" {
				return nil
			}
		}
	}
	if err := s.WaitDone(ctx); err != nil {
		return err
	}
	for i := range *n + 1 {
		msg := fmt.Sprintf("message %d", i)
		if i == *n {
			msg = "bye"
		}
		l := copy(s.Buf[i*slot:], msg)
		if err := s.QP.PostSend(&roce.SendWR{ID: uint64(i), Opcode: roce.WRSend, Flags: roce.SendSignaled,
			SGL: []roce.SGE{s.MR.SGE(i*slot, l)}}); err != nil {
			return err
		}
	}
	for range *n + 1 {
		if _, err := s.Wait(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "client: sent %d messages\n", *n+1)
	return nil
}
