// Command rc-read shows an RDMA READ: the client reads the server's buffer
// without the server's CPU taking part.
//
//	server$ rc-read -dev eth0
//	client$ rc-read -dev eth0 -peer 198.18.0.2
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
		fmt.Fprintln(os.Stderr, "rc-read:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rc-read", flag.ContinueOnError)
	o := exconn.Flags(fs, roce.RC, 1<<20)
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
	pattern := []byte("xroce reads this remotely. ")
	if s.Server {
		for i := 0; i < len(s.Buf); i += len(pattern) {
			copy(s.Buf[i:], pattern)
		}
		s.MR.Sync()                      // the device's workers will read it for the peer
		if err := s.Done(); err != nil { // filled
			return err
		}
		if err := s.WaitDone(ctx); err != nil {
			return err
		}
		fmt.Fprintln(out, "server: buffer read by the client")
		return nil
	}
	if err := s.WaitDone(ctx); err != nil {
		return err
	}
	err = s.QP.PostSend(&roce.SendWR{Opcode: roce.WRRDMARead, Flags: roce.SendSignaled,
		SGL: []roce.SGE{s.MR.SGE(0, len(s.Buf))}, RemoteAddr: s.Remote.Addr, RKey: s.Remote.RKey})
	if err != nil {
		return err
	}
	if _, err := s.Wait(ctx); err != nil {
		return err
	}
	for i, c := range s.Buf {
		if c != pattern[i%len(pattern)] {
			return fmt.Errorf("byte %d is %q, want %q", i, c, pattern[i%len(pattern)])
		}
	}
	fmt.Fprintf(out, "client: read %d bytes: %q…\n", len(s.Buf), s.Buf[:len(pattern)])
	return s.Done()
}
