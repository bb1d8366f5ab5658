// Command atomics shows the RDMA atomics on a 64-bit counter in the
// server's memory: FETCH_ADD increments it, CMP_SWAP replaces it only if it
// still holds the expected value.
//
//	server$ atomics -dev eth0
//	client$ atomics -dev eth0 -peer 198.18.0.2
package main

import (
	"context"
	"encoding/binary"
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
		fmt.Fprintln(os.Stderr, "atomics:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("atomics", flag.ContinueOnError)
	o := exconn.Flags(fs, roce.RC, 64)
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
		binary.LittleEndian.PutUint64(s.Buf, 100) // atomics use host (little-endian) order
		s.MR.Sync()                               // the device's workers will update it for the peer
		if err := s.Done(); err != nil {
			return err
		}
		if err := s.WaitDone(ctx); err != nil {
			return err
		}
		s.MR.Sync() // the peer is done: see what the workers wrote
		fmt.Fprintf(out, "server: counter is %d\n", binary.LittleEndian.Uint64(s.Buf))
		return nil
	}
	if err := s.WaitDone(ctx); err != nil {
		return err
	}
	atomic := func(op roce.WROpcode, compareAdd, swap uint64) (uint64, error) {
		err := s.QP.PostSend(&roce.SendWR{Opcode: op, Flags: roce.SendSignaled, CompareAdd: compareAdd, Swap: swap,
			SGL: []roce.SGE{s.MR.SGE(0, 8)}, RemoteAddr: s.Remote.Addr, RKey: s.Remote.RKey})
		if err != nil {
			return 0, err
		}
		if _, err := s.Wait(ctx); err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(s.Buf), nil
	}
	for range 3 {
		old, err := atomic(roce.WRAtomicFetchAdd, 1, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "client: FETCH_ADD 1: was %d\n", old)
	}
	old, err := atomic(roce.WRAtomicCmpAndSwp, 103, 1000)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "client: CMP_SWAP 103→1000: was %d\n", old)
	old, err = atomic(roce.WRAtomicCmpAndSwp, 103, 2000)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "client: CMP_SWAP 103→2000: was %d (no swap)\n", old)
	return s.Done()
}
