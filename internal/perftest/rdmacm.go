package perftest

import (
	"encoding/binary"
	"fmt"
)

// PingpongDestSize is the size of struct pingpong_dest on x86-64, the
// address message of the rdma_cm form of the exchange.
const PingpongDestSize = 56

// Offsets in struct pingpong_dest (perftest_resources.h).
const (
	pdLID      = 0
	pdOutReads = 4
	pdQPN      = 8
	pdPSN      = 12
	pdRKey     = 16
	// 20: 4 bytes of padding before the 64-bit vaddr (perftest sends
	// whatever is on its stack there; this package sends zeros).
	pdVAddr    = 24
	pdGID      = 32
	pdSRQN     = 48
	pdGIDIndex = 52
)

// PutPingpongDest writes d into b (at least PingpongDestSize bytes) as
// perftest's rdma_write_keys sends it over rdma_cm: struct pingpong_dest
// with every integer big-endian (htobe32, htobe64) and the GID raw.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         lid (int)                             |  0
//	|                      out_reads (int)                          |  4
//	|                         qpn (int)                             |  8
//	|                         psn (int)                             | 12
//	|                      rkey (unsigned)                          | 16
//	|                          padding                              | 20
//	|                                                               | 24
//	+              vaddr (unsigned long long)                       +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               | 32
//	+                   gid (union ibv_gid, raw)                    +
//	|                          16 bytes                             |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      srqn (unsigned)                          | 48
//	|                     gid_index (int)                           | 52
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
func (d *Dest) PutPingpongDest(b []byte) {
	b = b[:PingpongDestSize]
	clear(b)
	binary.BigEndian.PutUint32(b[pdLID:], uint32(d.LID))
	binary.BigEndian.PutUint32(b[pdOutReads:], uint32(d.OutReads))
	binary.BigEndian.PutUint32(b[pdQPN:], d.QPN)
	binary.BigEndian.PutUint32(b[pdPSN:], d.PSN)
	binary.BigEndian.PutUint32(b[pdRKey:], d.RKey)
	binary.BigEndian.PutUint64(b[pdVAddr:], d.VAddr)
	copy(b[pdGID:pdGID+16], d.GID[:])
	binary.BigEndian.PutUint32(b[pdSRQN:], d.SRQN)
	binary.BigEndian.PutUint32(b[pdGIDIndex:], uint32(d.GIDIndex))
}

// ParsePingpongDest reads a struct pingpong_dest sent over rdma_cm
// (PutPingpongDest). perftest itself reads lid, out_reads, qpn, psn, rkey,
// vaddr and the GID; this reads every field. Values wider than Dest's
// fields (a LID or out_reads above 65535, a QPN or PSN above 24 bits) are
// malformed.
func ParsePingpongDest(b []byte) (Dest, error) {
	if len(b) < PingpongDestSize {
		return Dest{}, fmt.Errorf("%w: address of %d bytes, want %d", ErrBadMessage, len(b), PingpongDestSize)
	}
	be := binary.BigEndian
	lid, out := be.Uint32(b[pdLID:]), be.Uint32(b[pdOutReads:])
	d := Dest{LID: uint16(lid), OutReads: uint16(out), QPN: be.Uint32(b[pdQPN:]), PSN: be.Uint32(b[pdPSN:]),
		RKey: be.Uint32(b[pdRKey:]), VAddr: be.Uint64(b[pdVAddr:]), SRQN: be.Uint32(b[pdSRQN:]),
		GIDIndex: int32(be.Uint32(b[pdGIDIndex:]))}
	copy(d.GID[:], b[pdGID:pdGID+16])
	switch {
	case lid > 0xffff, out > 0xffff:
		return Dest{}, fmt.Errorf("%w: address with LID %#x, out_reads %d", ErrBadMessage, lid, out)
	case d.QPN > 0xffffff, d.PSN > 0xffffff:
		return Dest{}, fmt.Errorf("%w: address with QPN %#x, PSN %#x (24 bits each)", ErrBadMessage, d.QPN, d.PSN)
	}
	return d, nil
}
