// Package pingpong speaks the out-of-band exchange of rdma-core's example
// tools ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong
// (libibverbs/examples), so that a host-side program can stand in for one end
// of those tools and the interop suite can drive a Linux rxe peer.
//
// The tools connect over TCP (port 18515 by default; the client connects).
// Each side sends one 52-byte message, the text "%04x:%06x:%06x:%s" (LID, QPN,
// PSN, and the GID as 32 hex digits of its 16 raw bytes) and a NUL. The client
// sends first; the server moves its QP to RTR and RTS, then replies; the client
// ends with "done" and a NUL. The tools read each message with a single read,
// so each is written with a single write. On RoCE the LID is 0 and the GID
// carries the address: ::ffff:a.b.c.d for IPv4 (rxe's GID index 1).
package pingpong

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// Port is the TCP port the tools use unless told otherwise (-p).
const Port = 18515

// MessageSize is the size of one address message: 51 characters and a NUL.
const MessageSize = 52

// done is the client's last message; the tools send it with its NUL.
var done = []byte("done\x00")

// Dest is one side's address as the tools exchange it.
type Dest struct {
	LID uint16     // 0 on RoCE
	QPN uint32     // 24 bits
	PSN uint32     // 24 bits: the first PSN this side sends
	GID netip.Addr // 16 bytes; an IPv4 address is sent as ::ffff:a.b.c.d
}

// ErrMessage reports a malformed address message.
var ErrMessage = errors.New("malformed pingpong address message")

// Message encodes d as the 52-byte message.
func (d Dest) Message() [MessageSize]byte {
	var m [MessageSize]byte
	gid := d.GID.As16()
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, hex.EncodeToString(gid[:]))
	copy(m[:], s)
	return m
}

// ParseMessage decodes a message the tools send. The NUL and anything after
// it are ignored.
func ParseMessage(b []byte) (Dest, error) {
	if len(b) < MessageSize-1 {
		return Dest{}, fmt.Errorf("%w: %d bytes, want %d", ErrMessage, len(b), MessageSize)
	}
	s := string(b[:MessageSize-1])
	if s[4] != ':' || s[11] != ':' || s[18] != ':' {
		return Dest{}, fmt.Errorf("%w: %q", ErrMessage, s)
	}
	lid, err1 := strconv.ParseUint(s[0:4], 16, 16)
	qpn, err2 := strconv.ParseUint(s[5:11], 16, 24)
	psn, err3 := strconv.ParseUint(s[12:18], 16, 24)
	raw, err4 := hex.DecodeString(s[19:51])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Dest{}, fmt.Errorf("%w: %q: %w", ErrMessage, s, err)
	}
	return Dest{LID: uint16(lid), QPN: uint32(qpn), PSN: uint32(psn), GID: netip.AddrFrom16([16]byte(raw))}, nil
}

// String formats d as the tools print their "local address" and "remote
// address" lines.
func (d Dest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", d.LID, d.QPN, d.PSN, d.GID)
}

// ClientExchange runs the client's half on a connection to a tool's server:
// it sends local, reads the server's address and sends "done".
func ClientExchange(rw io.ReadWriter, local Dest) (Dest, error) {
	m := local.Message()
	if _, err := rw.Write(m[:]); err != nil {
		return Dest{}, fmt.Errorf("send address: %w", err)
	}
	var buf [MessageSize]byte
	if _, err := io.ReadFull(rw, buf[:]); err != nil {
		return Dest{}, fmt.Errorf("read server address: %w", err)
	}
	remote, err := ParseMessage(buf[:])
	if err != nil {
		return Dest{}, err
	}
	if _, err := rw.Write(done); err != nil {
		return remote, fmt.Errorf("send done: %w", err)
	}
	return remote, nil
}

// ServerExchange runs the server's half on an accepted connection: it reads
// the client's address, calls ready (which should move the QP to RTR and RTS)
// and, if ready succeeds, sends local and waits for "done".
func ServerExchange(rw io.ReadWriter, local Dest, ready func(remote Dest) error) (Dest, error) {
	var buf [MessageSize]byte
	if _, err := io.ReadFull(rw, buf[:]); err != nil {
		return Dest{}, fmt.Errorf("read client address: %w", err)
	}
	remote, err := ParseMessage(buf[:])
	if err != nil {
		return Dest{}, err
	}
	if ready != nil {
		if err := ready(remote); err != nil {
			return remote, err
		}
	}
	m := local.Message()
	if _, err := rw.Write(m[:]); err != nil {
		return remote, fmt.Errorf("send address: %w", err)
	}
	// rdma-core's client sends "done" with its NUL; accept it without.
	var d [len("done\x00")]byte
	n, err := io.ReadAtLeast(rw, d[:], 4)
	if err != nil {
		return remote, fmt.Errorf("read done: %w", err)
	}
	if string(d[:4]) != "done" || (n == 5 && d[4] != 0) {
		return remote, fmt.Errorf("%w: want \"done\", got %q", ErrMessage, d[:n])
	}
	return remote, nil
}
