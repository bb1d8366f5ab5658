// Command ppexch plays one side of ibv_rc_pingpong's TCP address exchange
// (see package pingpong) against the real tool, without any RDMA: with
// -connect it is the client of an ibv_rc_pingpong server, with -listen the
// server of an ibv_rc_pingpong client. Either way the tool moves its QP to
// RTR/RTS and prints its "remote address" line; a client then sends its first
// SEND to the announced QP. interop/run uses it in the tap mode to prove the
// side channel, the addressing and the GIDs between the host and rxe in the VM.
//
//	ppexch -connect 198.18.1.2:18515 -gid ::ffff:198.18.1.1 -want-gid ::ffff:198.18.1.2
//	ppexch -listen 198.18.1.1:18515 -gid ::ffff:198.18.1.1 -want-gid ::ffff:198.18.1.2
package main

import (
	"errors"
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
		fmt.Fprintln(os.Stderr, "ppexch:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("ppexch", flag.ContinueOnError)
	connect := fs.String("connect", "", "be the client of the ibv_rc_pingpong server at host:port")
	listen := fs.String("listen", "", "be the server for one ibv_rc_pingpong client, listening on host:port")
	gid := fs.String("gid", "::ffff:198.18.1.1", "the GID to announce (an IPv4 address is mapped)")
	qpn := fs.Uint("qpn", 0x000123, "the QPN to announce")
	psn := fs.Uint("psn", 0x00abcd, "the PSN to announce")
	want := fs.String("want-gid", "", "fail unless the peer announces this GID")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*connect == "") == (*listen == "") {
		return errors.New("give one of -connect and -listen")
	}
	g, err := netip.ParseAddr(*gid)
	if err != nil {
		return fmt.Errorf("-gid: %w", err)
	}
	local := pingpong.Dest{QPN: uint32(*qpn) & 0xffffff, PSN: uint32(*psn) & 0xffffff, GID: netip.AddrFrom16(g.As16())}
	deadline := time.Now().Add(*timeout)

	var conn net.Conn
	if *connect != "" {
		conn, err = net.DialTimeout("tcp", *connect, *timeout)
		if err != nil {
			return err
		}
	} else {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "listening on %s\n", ln.Addr())
		if err := ln.(*net.TCPListener).SetDeadline(deadline); err != nil {
			ln.Close()
			return err
		}
		conn, err = ln.Accept()
		ln.Close()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		fmt.Fprintf(w, "connection from %s\n", conn.RemoteAddr())
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}

	var remote pingpong.Dest
	m := local.Message()
	if *connect != "" {
		fmt.Fprintf(w, "sent:           %q\n", m[:])
		remote, err = pingpong.ClientExchange(conn, local)
	} else {
		remote, err = pingpong.ServerExchange(conn, local, func(remote pingpong.Dest) error {
			r := remote.Message()
			fmt.Fprintf(w, "received:       %q\n", r[:])
			fmt.Fprintf(w, "sent:           %q\n", m[:])
			return nil
		})
	}
	if err != nil {
		return err
	}
	if *connect != "" {
		r := remote.Message()
		fmt.Fprintf(w, "received:       %q\n", r[:])
	} else {
		fmt.Fprintln(w, `received:       "done"`)
	}
	fmt.Fprintf(w, "  local address:  %s\n", local)
	fmt.Fprintf(w, "  remote address: %s\n", remote)
	if *want != "" {
		wg, err := netip.ParseAddr(*want)
		if err != nil {
			return fmt.Errorf("-want-gid: %w", err)
		}
		if netip.AddrFrom16(wg.As16()) != remote.GID {
			return fmt.Errorf("peer GID %s, want %s", remote.GID, wg)
		}
	}
	return nil
}
