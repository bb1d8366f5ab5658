// Command ppclient plays the client's side of ibv_rc_pingpong's TCP exchange
// (see package pingpong) against a real ibv_rc_pingpong server, without any
// RDMA: the server moves its QP to RTR/RTS and prints the remote address line.
// interop/run uses it in the tap mode to prove the side channel, the addressing
// and the GIDs between the host and rxe in the VM.
//
//	ppclient -addr 198.18.1.2:18515 -gid ::ffff:198.18.1.1 -want-gid ::ffff:198.18.1.2
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/xroce/xroce/interop/pingpong"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ppclient:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("ppclient", flag.ContinueOnError)
	addr := fs.String("addr", "198.18.1.2:18515", "the ibv_rc_pingpong server, host:port")
	gid := fs.String("gid", "::ffff:198.18.1.1", "the GID to announce (an IPv4 address is mapped)")
	qpn := fs.Uint("qpn", 0x000123, "the QPN to announce")
	psn := fs.Uint("psn", 0x00abcd, "the PSN to announce")
	want := fs.String("want-gid", "", "fail unless the server announces this GID")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	g, err := netip.ParseAddr(*gid)
	if err != nil {
		return fmt.Errorf("-gid: %w", err)
	}
	local := pingpong.Dest{QPN: uint32(*qpn) & 0xffffff, PSN: uint32(*psn) & 0xffffff, GID: netip.AddrFrom16(g.As16())}
	conn, err := net.DialTimeout("tcp", *addr, *timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(*timeout)); err != nil {
		return err
	}
	m := local.Message()
	fmt.Fprintf(w, "sent:           %q\n", m[:])
	remote, err := pingpong.ClientExchange(conn, local)
	if err != nil {
		return err
	}
	m = remote.Message()
	fmt.Fprintf(w, "received:       %q\n", m[:])
	fmt.Fprintf(w, "  local address:  %s\n", local)
	fmt.Fprintf(w, "  remote address: %s\n", remote)
	if *want != "" {
		wg, err := netip.ParseAddr(*want)
		if err != nil {
			return fmt.Errorf("-want-gid: %w", err)
		}
		if netip.AddrFrom16(wg.As16()) != remote.GID {
			return fmt.Errorf("server GID %s, want %s", remote.GID, wg)
		}
	}
	return nil
}
