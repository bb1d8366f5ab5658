//go:build linux

package rcopy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/roce"
	"github.com/xroce/xroce/stream"
)

// xroce rcopy is rdma-core's rcopy (librdmacm/examples/rcopy.c): a file
// copied to a server over an rsocket. "rcopy [-p port]" serves (for ever,
// one client at a time, writing each file where the client names it, as
// rcopy does); "rcopy SOURCE SERVER[:DESTINATION] [-p port]" sends. The
// messages are rcopy's: a 16-byte header {version 0, command, length,
// data, id} in the sender's byte order, which rcopy never swaps (x86:
// little-endian, what this side writes and reads), OPEN with the path and
// mode, WRITE with the size and then the bytes, CLOSE; each answered by
// the command with bit 7 set and a status (an errno) in data. -d names the
// interface, and -n ends the server after that many clients (neither is
// rcopy's).

// Cmd is xroce rcopy.
var Cmd = base.Command{Name: "rcopy", Summary: "copy a file to or from a peer over rsockets, as rdma-core's rcopy", Run: runRcopy}

// rcopy's commands.
const (
	rcopyOpen  = 1
	rcopyClose = 2
	rcopyWrite = 3
	rcopyResp  = 0x80
	rcopyHdr   = 16
)

type rcopyOptions struct {
	src, server, dst string
	port             string
	ifname           string
	clients          int // -n: 0 for ever
}

func rcopyUsage(w io.Writer) {
	fmt.Fprint(w, "usage 1: rcopy [options]\n\t     starts the server application\n\t[-p  port_number]\n"+
		"usage 2: rcopy source server[:destination] [options]\n\t     source - file name and path\n"+
		"\t     server - name or address\n\t     destination - file name and path\n\t[-p  port_number]\n"+
		"xroce: [-d interface] [-n clients (server: end after so many)]\n")
}

// parseRcopy reads rcopy's command line: a server when there is no
// argument or the first is a flag, else a client.
func parseRcopy(stdout io.Writer, args []string) (o *rcopyOptions, done bool) {
	o = &rcopyOptions{port: "7427"}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if len(args) < 2 {
			rcopyUsage(stdout)
			return o, true
		}
		o.src, o.server = args[0], args[1]
		if i := strings.IndexByte(o.server, ':'); i >= 0 {
			o.server, o.dst = o.server[:i], o.server[i+1:]
		}
		if o.dst == "" {
			o.dst = o.src
		}
		args = args[2:]
	}
	opts, rest := base.Getopt(args, "p:d:n:")
	for _, op := range opts {
		switch op.C {
		case 'p':
			o.port = op.Arg
		case 'd':
			o.ifname = op.Arg
		case 'n':
			o.clients = base.Atoi(op.Arg)
		default:
			rcopyUsage(stdout)
			return o, true
		}
	}
	if len(rest) > 0 {
		rcopyUsage(stdout)
		return o, true
	}
	return o, false
}

func runRcopy(ctx context.Context, e *base.Env, args []string) error {
	o, done := parseRcopy(e.Stdout, args)
	if done {
		return base.Status(1)
	}
	r := &rcopy{o: o, w: e.Stdout}
	if o.server == "" {
		return base.Status(r.serve(ctx, e.Stderr))
	}
	return base.Status(r.send(ctx, e.Stderr))
}

type rcopy struct {
	o *rcopyOptions
	w io.Writer
}

func (r *rcopy) printf(format string, a ...any) { fmt.Fprintf(r.w, format, a...) }

// rcopyMsg is a message header.
type rcopyMsg struct {
	command uint8
	len     uint16
	data    uint32
	id      uint64
}

func (m rcopyMsg) put(b []byte) {
	b[0], b[1] = 0, m.command
	binary.LittleEndian.PutUint16(b[2:], m.len)
	binary.LittleEndian.PutUint32(b[4:], m.data)
	binary.LittleEndian.PutUint64(b[8:], m.id)
}

// readMsg reads a header as msg_recv_hdr does: version 0 and a length of
// at least the header.
func readMsg(c net.Conn) (rcopyMsg, error) {
	var b [rcopyHdr]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return rcopyMsg{}, err
	}
	m := rcopyMsg{command: b[1], len: binary.LittleEndian.Uint16(b[2:]), data: binary.LittleEndian.Uint32(b[4:]),
		id: binary.LittleEndian.Uint64(b[8:])}
	if b[0] != 0 || m.len < rcopyHdr {
		return m, fmt.Errorf("invalid version %d or length %d", b[0], m.len)
	}
	return m, nil
}

func writeMsg(c net.Conn, m rcopyMsg, extra []byte) error {
	b := make([]byte, rcopyHdr+len(extra))
	m.put(b)
	copy(b[rcopyHdr:], extra)
	_, err := c.Write(b)
	return err
}

// respond answers m with status.
func respond(c net.Conn, m rcopyMsg, status uint32) error {
	return writeMsg(c, rcopyMsg{command: m.command | rcopyResp, len: rcopyHdr, data: status, id: m.id}, nil)
}

// errnoOf is the errno of a failed file operation, EIO if none.
func errnoOf(err error) uint32 {
	var no syscall.Errno
	if errors.As(err, &no) {
		return uint32(no)
	}
	return uint32(syscall.EIO)
}

// config is the stream's: rsocket's protocol and its retry count 7 (for
// ever, as between two rcopy), so a stalled peer is waited for, also at
// close (at most rdmacm.PeerTimeout).
func (r *rcopy) config() stream.Config {
	return stream.Config{Protocol: stream.ProtocolRsocket, RingSize: 1 << 20, Connect: roce.ConnectOptions{RetryCnt: 7},
		Linger: rdmacm.PeerTimeout()}
}

// openRcopyDevice opens the device of -d, else of the route to peer (a
// client) or of the only interface with an address (a server).
func openRcopyDevice(w io.Writer, ifname string, peer netip.Addr) (*rdmacm.Device, error) {
	name, ierr := rdmacm.Interface(ifname, netip.Addr{}, peer)
	if ierr != nil {
		return nil, ierr
	}
	return rdmacm.Open(w, "rcopy", name)
}

// serve is rcopy's server_run.
func (r *rcopy) serve(ctx context.Context, stderr io.Writer) int {
	port, gerr := rdmacm.LookupPort(r.o.port)
	if gerr != nil {
		r.printf("getaddrinfo failed: %s\n", gerr.Msg)
		return 1
	}
	d, err := openRcopyDevice(stderr, r.o.ifname, netip.Addr{})
	if err != nil {
		fmt.Fprintf(stderr, "rcopy: %v\n", err)
		return 1
	}
	defer d.Close()
	ln, err := r.config().ListenCM(d.Agent, netip.AddrPortFrom(netip.IPv4Unspecified(), port))
	if err != nil {
		r.printf("rlisten failed: %v\n", err)
		return 1
	}
	defer ln.Close()
	rdmacm.Listening()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for n := 0; r.o.clients == 0 || n < r.o.clients; n++ {
		r.printf("waiting for connection...")
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return rdmacm.ExitInterrupted
			}
			r.printf("raccept failed: %v\n", err)
			return 1
		}
		r.printf("client: %v\n", c.RemoteAddr().(stream.Addr).IP)
		stopc := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
		r.process(c)
		stopc()
		c.Close()
	}
	return 0
}

// process is rcopy's server_process: commands until one fails or the
// client goes.
func (r *rcopy) process(c net.Conn) {
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		m, err := readMsg(c)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.printf("%v\n", err)
			}
			return
		}
		var st uint32
		switch m.command {
		case rcopyOpen:
			r.printf("opening: ")
			if f != nil {
				r.printf("cannot open another file\n")
				respond(c, m, uint32(syscall.EBUSY))
				return
			}
			path := make([]byte, m.len-rcopyHdr)
			if _, err := io.ReadFull(c, path); err != nil {
				r.printf("error receiving path\n")
				return
			}
			name := string(rdmacm.CString(path))
			r.printf("%s, ", name)
			if f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, os.FileMode(m.data&0o777)); err != nil {
				r.printf("unable to open destination file\n")
				st, f = errnoOf(err), nil
			}
		case rcopyWrite:
			r.printf("transferring")
			st = r.receive(c, m, f)
		case rcopyClose:
			r.printf("closing...")
			if f != nil {
				if err := f.Close(); err != nil {
					st = errnoOf(err)
				}
				f = nil
			}
			respond(c, m, st)
			r.printf("done\n")
			continue
		default:
			respond(c, m, uint32(syscall.EINVAL))
			return
		}
		if err := respond(c, m, st); err != nil || st != 0 {
			return
		}
	}
}

// receive is rcopy's server_write: the size, then the bytes into f.
func (r *rcopy) receive(c net.Conn, m rcopyMsg, f *os.File) uint32 {
	if f == nil {
		r.printf("...file not opened\n")
		return uint32(syscall.EINVAL)
	}
	if m.len != rcopyHdr+8 {
		r.printf("...invalid message length %d\n", m.len)
		return uint32(syscall.EINVAL)
	}
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return uint32(syscall.EIO)
	}
	n := int64(binary.LittleEndian.Uint64(b[:]))
	r.printf("...%d bytes...", n)
	if err := f.Truncate(0); err != nil {
		return errnoOf(err)
	}
	if k, err := io.CopyN(f, c, n); err != nil || k != n {
		r.printf("...error receiving data\n")
		return uint32(syscall.EIO)
	}
	return 0
}

// send is rcopy's client_run.
func (r *rcopy) send(ctx context.Context, stderr io.Writer) int {
	peer, gerr := rdmacm.LookupAddr(ctx, r.o.server, false)
	port, gerr2 := rdmacm.LookupPort(r.o.port)
	if gerr == nil {
		gerr = gerr2
	}
	if gerr != nil {
		r.printf("getaddrinfo failed: %s\n", gerr.Msg)
		return 1
	}
	// The source is opened first (rcopy opens it once connected), so
	// that a missing file fails at once.
	f, err := os.Open(r.o.src)
	if err != nil {
		fmt.Fprintf(stderr, "rcopy: %v\n", err)
		return 1
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		fmt.Fprintf(stderr, "rcopy: %v\n", err)
		return 1
	}
	d, err := openRcopyDevice(stderr, r.o.ifname, peer)
	if err != nil {
		fmt.Fprintf(stderr, "rcopy: %v\n", err)
		return 1
	}
	defer d.Close()
	cctx, cancel := context.WithTimeout(ctx, rdmacm.PeerTimeout())
	c, err := r.config().DialCM(cctx, d.Agent, netip.AddrPortFrom(peer, port))
	cancel()
	if err != nil {
		r.printf("rconnect failed: %v\n", err)
		return 1
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	r.printf("opening...")
	path := make([]byte, (len(r.o.dst)+8)&^7)
	copy(path, r.o.dst)
	if st := r.call(c, rcopyMsg{command: rcopyOpen, len: uint16(rcopyHdr + len(path)), data: uint32(fi.Mode().Perm())}, path); st != 0 {
		return st
	}
	r.printf("transferring")
	var size [8]byte
	binary.LittleEndian.PutUint64(size[:], uint64(fi.Size()))
	if err := writeMsg(c, rcopyMsg{command: rcopyWrite, len: rcopyHdr + 8}, size[:]); err != nil {
		r.printf("\nrsend: %v\n", rdmacm.ErrText(err))
		return 1
	}
	r.printf("...")
	start := time.Now()
	if _, err := io.Copy(c, f); err != nil {
		r.printf("\nrsend: %v\n", rdmacm.ErrText(err))
		return 1
	}
	st := r.response(c, rcopyWrite)
	elapsed := time.Since(start)
	r.printf("closing...")
	if st2 := r.call(c, rcopyMsg{command: rcopyClose, len: rcopyHdr}, nil); st == 0 {
		st = st2
	}
	if st != 0 {
		return st
	}
	r.printf("done\n")
	usec := max(float64(elapsed.Microseconds()), 1)
	r.printf("%d bytes in %.2f seconds = %.2f Gb/sec\n", fi.Size(), usec/1e6, float64(fi.Size()*8)/(1000*usec))
	return 0
}

// call sends m (and extra) and returns the status of its response.
func (r *rcopy) call(c net.Conn, m rcopyMsg, extra []byte) int {
	if err := writeMsg(c, m, extra); err != nil {
		r.printf("\nrsend: %v\n", rdmacm.ErrText(err))
		return 1
	}
	return r.response(c, m.command)
}

// response is rcopy's msg_get_resp: a bare header answering cmd; its
// status.
func (r *rcopy) response(c net.Conn, cmd uint8) int {
	m, err := readMsg(c)
	if err != nil {
		r.printf("\n%v\n", rdmacm.ErrText(err))
		return 1
	}
	if m.len != rcopyHdr || m.command != cmd|rcopyResp {
		r.printf("invalid length %d or bad command response %x:%x\n", m.len, m.command, cmd|rcopyResp)
		return 1
	}
	if m.data != 0 {
		r.printf("\nthe server says: %v\n", syscall.Errno(m.data))
	}
	return int(m.data)
}
