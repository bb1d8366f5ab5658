// Package perftest speaks the out-of-band exchange of the perftest suite
// (ib_write_bw, ib_read_lat and the others, github.com/linux-rdma/perftest)
// over TCP, and formats results the way those tools print them, so that
// xroce perf can stand in for either end of a perftest run.
//
// The exchange is that of perftest 4.5 (Debian bookworm's perftest
// 4.5+0.17-1, which calls itself version 6.06 on the wire) and of later
// releases that keep it: the client writes each message first and the
// server answers with its own, every message a fixed size:
//
//  1. the version string, 16 bytes, NUL-padded ("6.06");
//  2. the system data: the cycle buffer (page) size and the cache line
//     size, each a big-endian 32-bit integer exchanged apart (peers of
//     version 5.32 and later);
//  3. the MTU, as the decimal digit of the ibv_mtu value and a NUL, 2 bytes
//     (5.31 and later; 1 = 256 … 5 = 4096); each side then uses the smaller;
//  4. per QP and repeatedly as a barrier, the QP's address: 108 bytes,
//     "%04x:%04x:%06x:%06x:%08x:%016x:" (LID, outstanding reads, QPN, PSN,
//     rkey, address) then the 16 GID bytes as "%02x:" each, then
//     "%08x:" (SRQ number) and a NUL (59 bytes without a GID, which
//     perftest sends only on InfiniBand);
//  5. at the end of a bandwidth test, the results: size (8 bytes),
//     iterations (8 bytes from 5.33 on, else 4), peak and average
//     bandwidth and message rate (IEEE doubles), all big-endian, each
//     exchanged apart; then a last address exchange and "done" with its NUL.
//
// Peers older than 5.70 are refused, as perftest itself does.
//
// With -R (rdma_cm) perftest carries the same exchange over an RC
// connection that librdmacm makes instead of TCP (the control connection,
// on the same port, with no READs or atomics): each message is one SEND of
// its size into a 56-byte receive that each side keeps posted, and the
// address of step 4 is struct pingpong_dest itself, 56 bytes, its integers
// big-endian (PutPingpongDest); there is no "done" at the end. NewCMConn
// speaks that form over a Transport that sends and receives the SENDs.
package perftest

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// Version is the version string this package sends: perftest 4.5-0.17's.
const Version = "6.06"

// MinVersion is the oldest peer version accepted (as perftest 4.5 does).
const MinVersion = 5.70

// ErrPeerClosed is wrapped by a Transport's errors that come of the peer's
// closing the connection.
var ErrPeerClosed = errors.New("the peer closed the connection")

// VersionSize is the size of the version message.
const VersionSize = 16

// ErrBadMessage: a message from the peer did not parse.
var ErrBadMessage = errors.New("perftest: malformed message")

// Transport carries the exchange's messages, one at a time each way.
type Transport interface {
	// Send sends b as one message.
	Send(b []byte) error
	// Recv receives the next message and copies its first len(b) bytes
	// into b; a shorter message is an error.
	Recv(b []byte) error
}

// stream is the Transport of a TCP connection: a message is its bytes in
// the stream.
type stream struct{ c net.Conn }

func (s stream) Send(b []byte) error {
	_, err := s.c.Write(b)
	return err
}

func (s stream) Recv(b []byte) error {
	_, err := io.ReadFull(s.c, b)
	return err
}

// Conn is one side of the exchange, over TCP or over perftest's rdma_cm
// control connection. Its methods are not safe for concurrent use.
type Conn struct {
	t      Transport
	tcp    net.Conn // nil over rdma_cm
	client bool
	// RemoteVersion is the peer's version string, once Versions ran.
	RemoteVersion string
	// Version is the version string Versions sends; "" means Version
	// (4.5's).
	Version string
}

// NewConn speaks the exchange over the TCP connection c; client says
// which side writes first.
func NewConn(c net.Conn, client bool) *Conn { return &Conn{t: stream{c}, tcp: c, client: client} }

// NewCMConn speaks the exchange as perftest -R does, over t, the rdma_cm
// control connection: addresses are struct pingpong_dest (56 bytes) and
// Close sends no "done".
func NewCMConn(t Transport, client bool) *Conn { return &Conn{t: t, client: client} }

// Exchange sends mine and receives len(theirs) bytes into theirs: the
// client sends first, the server receives first.
func (c *Conn) Exchange(mine, theirs []byte) error { return c.exchange(mine, theirs, false) }

// exchange is Exchange; last says this is the final exchange, where the
// server's answer failing with ErrPeerClosed is no failure: a client that
// has its answer ends and disconnects at once, and when the ACK of the
// server's SEND is lost the client's DREQ comes before it (with rdma_cm
// the DREQ ends the wait for a SEND's completion, which the client's QP,
// in ERR by then, would never give).
func (c *Conn) exchange(mine, theirs []byte, last bool) error {
	if c.client {
		if err := c.t.Send(mine); err != nil {
			return err
		}
		return c.t.Recv(theirs)
	}
	if err := c.t.Recv(theirs); err != nil {
		return err
	}
	if err := c.t.Send(mine); err != nil && !(last && errors.Is(err, ErrPeerClosed)) {
		return err
	}
	return nil
}

// Versions exchanges version strings and checks the peer's.
func (c *Conn) Versions() error {
	var mine, theirs [VersionSize]byte
	copy(mine[:], cmp.Or(c.Version, Version))
	if err := c.Exchange(mine[:], theirs[:]); err != nil {
		return fmt.Errorf("version exchange: %w", err)
	}
	v, _, _ := strings.Cut(string(theirs[:]), "\x00")
	c.RemoteVersion = v
	if f := c.remote(); f < MinVersion {
		return fmt.Errorf("peer's perftest version %q: %w: older than %.2f is not supported", v, ErrBadMessage, MinVersion)
	}
	return nil
}

// remote is the peer's version as a number (atof: leading digits only).
func (c *Conn) remote() float64 {
	s := c.RemoteVersion
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		end++
	}
	f, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0
	}
	return f
}

// SysData exchanges the cycle buffer and cache line sizes and returns the
// larger of each side's.
func (c *Conn) SysData(cycleBuffer, cacheLine int) (int, int, error) {
	if c.remote() < 5.32 {
		return cycleBuffer, cacheLine, nil
	}
	out := func(v int) (int, error) {
		var m, t [4]byte
		binary.BigEndian.PutUint32(m[:], uint32(v))
		if err := c.Exchange(m[:], t[:]); err != nil {
			return 0, fmt.Errorf("system data exchange: %w", err)
		}
		return max(v, int(int32(binary.BigEndian.Uint32(t[:])))), nil
	}
	cb, err := out(cycleBuffer)
	if err != nil {
		return 0, 0, err
	}
	cl, err := out(cacheLine)
	return cb, cl, err
}

// MTU exchanges the MTU as an ibv_mtu value (1 = 256 … 5 = 4096) and
// returns the one to use: the smaller of both.
func (c *Conn) MTU(mtu int) (int, error) {
	if c.remote() < 5.1 {
		return mtu, nil
	}
	n := 4
	if c.remote() >= 5.31 {
		n = 2
	}
	m := make([]byte, n)
	copy(m, strconv.Itoa(mtu))
	t := make([]byte, n)
	if err := c.Exchange(m, t); err != nil {
		return 0, fmt.Errorf("MTU exchange: %w", err)
	}
	s, _, _ := strings.Cut(string(t), "\x00")
	rem, err := strconv.Atoi(s)
	if err == nil && rem >= 1 && rem <= 5 && rem < mtu {
		return rem, nil
	}
	return mtu, nil
}

// Dest is a QP's address as perftest exchanges it (struct pingpong_dest).
type Dest struct {
	LID      uint16
	OutReads uint16 // outstanding reads and atomics the side allows
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64 // where the peer may write or read
	GID      [16]byte
	SRQN     uint32
	// GIDIndex is the sender's GID index: only the rdma_cm form carries
	// it, and perftest does not read it.
	GIDIndex int32
}

// DestSize is the size of an address message with a GID; DestSizeNoGID
// without one (InfiniBand without GRH).
const (
	DestSize      = 108
	DestSizeNoGID = 59
)

// Marshal writes d into b, of DestSize bytes.
func (d *Dest) Marshal(b []byte) {
	s := fmt.Sprintf("%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr)
	for _, g := range d.GID {
		s += fmt.Sprintf("%02x:", g)
	}
	s += fmt.Sprintf("%08x:", d.SRQN)
	clear(b[:DestSize])
	copy(b, s)
}

// ParseDest parses an address message of DestSize bytes.
func ParseDest(b []byte) (Dest, error) {
	var d Dest
	if len(b) < DestSize-1 {
		return d, fmt.Errorf("%w: address of %d bytes, want %d", ErrBadMessage, len(b), DestSize)
	}
	s, _, _ := strings.Cut(string(b), "\x00")
	f := strings.Split(s, ":")
	if len(f) < 6+16+1 {
		return d, fmt.Errorf("%w: address %q: %d fields", ErrBadMessage, s, len(f))
	}
	var err error
	num := func(i, bits int) uint64 {
		v, e := strconv.ParseUint(f[i], 16, bits)
		if e != nil && err == nil {
			err = fmt.Errorf("%w: address %q: field %d (%q): %w", ErrBadMessage, s, i+1, f[i], e)
		}
		return v
	}
	d.LID, d.OutReads = uint16(num(0, 16)), uint16(num(1, 16))
	d.QPN, d.PSN = uint32(num(2, 24)), uint32(num(3, 24))
	d.RKey, d.VAddr = uint32(num(4, 32)), num(5, 64)
	for i := range d.GID {
		d.GID[i] = byte(num(6+i, 8))
	}
	d.SRQN = uint32(num(22, 32))
	return d, err
}

// HandShake exchanges addresses: the client sends first.
func (c *Conn) HandShake(my *Dest) (Dest, error) { return c.handShake(my, false) }

// handShake is HandShake; last is as for exchange.
func (c *Conn) handShake(my *Dest, last bool) (Dest, error) {
	var m, t [DestSize]byte
	n := DestSize
	if c.tcp == nil {
		n = PingpongDestSize
		my.PutPingpongDest(m[:n])
	} else {
		my.Marshal(m[:])
	}
	if err := c.exchange(m[:n], t[:n], last); err != nil {
		return Dest{}, fmt.Errorf("address exchange: %w", err)
	}
	if c.tcp == nil {
		return ParsePingpongDest(t[:n])
	}
	return ParseDest(t[:])
}

// BWReport is a bandwidth result as exchanged (struct bw_report_data).
type BWReport struct {
	Size    uint64
	Iters   uint64
	Peak    float64 // MB/s (2^20 bytes) or Gbit/s, as printed
	Avg     float64
	MsgRate float64 // millions of messages per second
}

// BWReports exchanges results: the client sends its own, the server gets
// them (and sends its own, usually empty).
func (c *Conn) BWReports(my BWReport) (BWReport, error) {
	var r BWReport
	u64 := func(v uint64, n int) (uint64, error) {
		m, t := make([]byte, 8), make([]byte, 8)
		if n == 8 {
			binary.BigEndian.PutUint64(m, v)
		} else {
			binary.BigEndian.PutUint32(m, uint32(v))
		}
		if err := c.Exchange(m[:n], t[:n]); err != nil {
			return 0, fmt.Errorf("report exchange: %w", err)
		}
		if n == 8 {
			return binary.BigEndian.Uint64(t), nil
		}
		return uint64(binary.BigEndian.Uint32(t)), nil
	}
	var err error
	if r.Size, err = u64(my.Size, 8); err != nil {
		return r, err
	}
	n := 4
	if c.remote() >= 5.33 {
		n = 8
	}
	if r.Iters, err = u64(my.Iters, n); err != nil {
		return r, err
	}
	for _, p := range []struct {
		mine   float64
		theirs *float64
	}{{my.Peak, &r.Peak}, {my.Avg, &r.Avg}, {my.MsgRate, &r.MsgRate}} {
		v, err := u64(math.Float64bits(p.mine), 8)
		if err != nil {
			return r, err
		}
		*p.theirs = math.Float64frombits(v)
	}
	return r, nil
}

// Close ends the exchange as perftest does: a last address exchange, then
// over TCP "done" and its NUL, and the connection is closed. Over rdma_cm
// the last exchange is all; the caller ends the connections.
func (c *Conn) Close(my *Dest) error {
	if c.tcp == nil {
		_, err := c.handShake(my, true)
		return err
	}
	defer c.tcp.Close()
	if _, err := c.HandShake(my); err != nil {
		return err
	}
	// The peer writes its "done" and closes without reading ours, so
	// a peer already gone is no failure.
	if _, err := c.tcp.Write([]byte("done\x00")); err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("send done: %w", err)
	}
	return nil
}
