package roce

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// ErrBadMessage: a connection setup message did not parse.
var ErrBadMessage = errors.New("roce: malformed connection message")

// Codec encodes the Endpoint each side sends during connection setup, as
// fixed-size messages. The codecs here are stateless and safe for
// concurrent use.
type Codec interface {
	// Size is the length of every message.
	Size() int
	// Marshal writes e into b, of Size bytes.
	Marshal(b []byte, e Endpoint)
	// Unmarshal parses a message of Size bytes.
	Unmarshal(b []byte) (Endpoint, error)
}

// PingpongCodec is the message of rdma-core's ibv_rc_pingpong and
// ibv_ud_pingpong: "%04x:%06x:%06x:%s" (LID, QPN, PSN, GID as 32 hex digits
// of its 16 bytes) and a NUL, 52 bytes. It carries no MTU, rkey or address.
var PingpongCodec Codec = pingpong{}

// XroceCodec is the pingpong message followed by the MTU, rkey, address
// and Q_Key: "%04x:%06x:%06x:%32s:%1x:%08x:%016x:%08x" and a NUL, 89 bytes.
var XroceCodec Codec = xroceCodec{}

type pingpong struct{}

const pingpongSize = 4 + 1 + 6 + 1 + 6 + 1 + 32 + 1

func (pingpong) Size() int { return pingpongSize }

func (pingpong) Marshal(b []byte, e Endpoint) {
	b = b[:0]
	b = appendHex(b, uint64(e.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(e.QPN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(e.PSN), 6)
	b = append(b, ':')
	g := e.GID.As16()
	b = hex.AppendEncode(b, g[:])
	b = append(b, 0)
	_ = b
}

func appendHex(b []byte, v uint64, width int) []byte {
	s := strconv.FormatUint(v, 16)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

func (pingpong) Unmarshal(b []byte) (Endpoint, error) {
	var e Endpoint
	if len(b) < pingpongSize-1 {
		return e, fmt.Errorf("%w: %d bytes", ErrBadMessage, len(b))
	}
	field := func(s []byte) (uint64, error) { return strconv.ParseUint(string(s), 16, 32) }
	if b[4] != ':' || b[11] != ':' || b[18] != ':' {
		return e, fmt.Errorf("%w: %q", ErrBadMessage, b)
	}
	lid, err1 := field(b[0:4])
	qpn, err2 := field(b[5:11])
	psn, err3 := field(b[12:18])
	var g [16]byte
	_, err4 := hex.Decode(g[:], b[19:51])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return e, fmt.Errorf("%w: %q: %w", ErrBadMessage, b, err)
	}
	e.LID, e.QPN, e.PSN, e.GID = uint16(lid), uint32(qpn), uint32(psn), netip.AddrFrom16(g)
	return e, nil
}

type xroceCodec struct{}

const xroceSize = pingpongSize + 37 // ":%1x:%08x:%016x:%08x" before the NUL

func (xroceCodec) Size() int { return xroceSize }

func (xroceCodec) Marshal(b []byte, e Endpoint) {
	pingpong{}.Marshal(b, e)
	x := b[pingpongSize-1 : pingpongSize-1]
	x = append(x, ':')
	x = appendHex(x, uint64(e.MTU), 1)
	x = append(x, ':')
	x = appendHex(x, uint64(e.RKey), 8)
	x = append(x, ':')
	x = appendHex(x, e.Addr, 16)
	x = append(x, ':')
	x = appendHex(x, uint64(e.QKey), 8)
	x = append(x, 0)
	_ = x
}

func (xroceCodec) Unmarshal(b []byte) (Endpoint, error) {
	if len(b) < xroceSize-1 {
		return Endpoint{}, fmt.Errorf("%w: %d bytes", ErrBadMessage, len(b))
	}
	e, err := pingpong{}.Unmarshal(b[:pingpongSize-1])
	if err != nil {
		return e, err
	}
	x := b[pingpongSize-1:]
	if x[0] != ':' || x[2] != ':' || x[11] != ':' || x[28] != ':' {
		return e, fmt.Errorf("%w: %q", ErrBadMessage, b)
	}
	mtu, err1 := strconv.ParseUint(string(x[1:2]), 16, 8)
	rkey, err2 := strconv.ParseUint(string(x[3:11]), 16, 32)
	addr, err3 := strconv.ParseUint(string(x[12:28]), 16, 64)
	qkey, err4 := strconv.ParseUint(string(x[29:37]), 16, 32)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return e, fmt.Errorf("%w: %q: %w", ErrBadMessage, b, err)
	}
	if MTU(mtu) > MTU4096 {
		return e, fmt.Errorf("%w: MTU %d", ErrBadMessage, mtu)
	}
	e.MTU, e.RKey, e.Addr, e.QKey = MTU(mtu), uint32(rkey), addr, uint32(qkey)
	return e, nil
}

// ConnectTCP sets up q over an established TCP connection with the
// exchange of ibv_rc_pingpong: the client sends its Endpoint, the server
// reads it, brings its QP to RTS and answers with its own, the client
// brings its QP to RTS and sends "done". It returns the peer's Endpoint.
// ctx bounds the whole exchange. With PingpongCodec the path MTU is the
// device's active MTU (pingpong's default 1024 on a 1500-byte link).
func (q *QP) ConnectTCP(ctx context.Context, conn net.Conn, client bool, local Endpoint, codec Codec, opts ConnectOptions) (Endpoint, error) {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg := make([]byte, codec.Size())
	send := func() error {
		codec.Marshal(msg, local)
		_, err := conn.Write(msg)
		return err
	}
	recv := func() (Endpoint, error) {
		if _, err := io.ReadFull(conn, msg); err != nil {
			return Endpoint{}, err
		}
		return codec.Unmarshal(msg)
	}
	fail := func(what string, err error) (Endpoint, error) {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return Endpoint{}, fmt.Errorf("connect qp %#x over tcp: %s: %w", q.qpn, what, err)
	}
	if client {
		if err := send(); err != nil {
			return fail("send", err)
		}
		remote, err := recv()
		if err != nil {
			return fail("receive", err)
		}
		if err := q.Connect(ctx, local, remote, opts); err != nil {
			return fail("modify", err)
		}
		if _, err := conn.Write([]byte("done\x00")); err != nil {
			return fail("send done", err)
		}
		return remote, nil
	}
	remote, err := recv()
	if err != nil {
		return fail("receive", err)
	}
	if err := q.Connect(ctx, local, remote, opts); err != nil {
		return fail("modify", err)
	}
	if err := send(); err != nil {
		return fail("send", err)
	}
	done := make([]byte, 5)
	n, err := io.ReadAtLeast(conn, done, 4)
	if err != nil || !bytes.Equal(bytes.TrimRight(done[:n], "\x00"), []byte("done")) {
		return fail("receive done", errors.Join(err, fmt.Errorf("%w: %q", ErrBadMessage, done[:n])))
	}
	return remote, nil
}
