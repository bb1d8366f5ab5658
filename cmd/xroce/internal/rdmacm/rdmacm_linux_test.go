//go:build linux

package rdmacm

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/xroce/xroce/roce"
)

// The ping data as rping writes it (the strings of rdma-core's rping -v).
func TestRpingPattern(t *testing.T) {
	for _, tc := range []struct {
		ping, size int
		want       string
	}{
		{0, 64, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"},
		{1, 64, "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs"},
		{57, 64, "rdma-ping-57: zABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnop"},
		{58, 64, "rdma-ping-58: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopq"},
		{0, 23, "rdma-ping-0: ABCDEFGHI"},
		{1000000, 23, "rdma-ping-1000000: WXY"},
		{2147483647, 23, "rdma-ping-2147483647: "},
		{5, 1, ""}, // the size quirk: snprintf truncates to nothing
		{3, 10, "rdma-ping"},
	} {
		b := bytes.Repeat([]byte{0xee}, tc.size)
		RpingFill(b, tc.ping)
		if b[len(b)-1] != 0 || string(CString(b)) != tc.want || len(CString(b)) != tc.size-1 && tc.size > 20 {
			t.Errorf("ping %d, size %d: %q, want %q", tc.ping, tc.size, b, tc.want)
		}
	}
	// Every byte of a long buffer: the letters run on, wrapping 'z' to 'A'.
	b := make([]byte, 300)
	RpingFill(b, 7)
	for i := len("rdma-ping-7: "); i < len(b)-1; i++ {
		if want := byte(65 + (7+i-13)%58); b[i] != want {
			t.Fatalf("byte %d = %q, want %q", i, b[i], want)
		}
	}
}

// The reply's address vector from a receive's GRH area, as
// ibv_create_ah_from_wc makes it: back to the sender, from the address
// the datagram was sent to, with its TTL (hop limit) and TOS (traffic
// class); refused without a GRH, for a failed completion, for a
// multicast or foreign destination.
func TestUdaddyReplyAV(t *testing.T) {
	mac := []byte{2, 0, 0, 0, 0, 2}
	peerMAC := [6]byte{2, 0, 0, 0, 0, 1}
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	gids := []netip.Addr{netip.MustParseAddr("fe80::2"), netip.AddrFrom16(b.As16())}
	v4 := func(tos, ttl byte, src, dst netip.Addr) []byte {
		g := make([]byte, 40)
		ip := g[20:]
		ip[0], ip[1], ip[8], ip[9] = 0x45, tos, ttl, 17
		copy(ip[12:], src.AsSlice())
		copy(ip[16:], dst.AsSlice())
		return g
	}
	v6 := make([]byte, 40)
	copy(v6, []byte{0x6a, 0xb1, 0x23, 0x45, 0, 0, 17, 9})
	ll1 := netip.MustParseAddr("fe80::1").As16()
	ll2 := netip.MustParseAddr("fe80::2").As16()
	copy(v6[8:], ll1[:])
	copy(v6[24:], ll2[:])
	ok := roce.WC{Opcode: roce.WCRecv, Flags: roce.WCWithGRH | roce.WCWithImm, SrcMAC: peerMAC}
	for _, tc := range []struct {
		name string
		grh  []byte
		wc   roce.WC
		want *roce.AddressVector
	}{
		{"ipv4", v4(0x48, 33, a, b), ok, &roce.AddressVector{DstMAC: peerMAC, SrcMAC: [6]byte(mac), DstIP: a, SrcIP: b, HopLimit: 33, TrafficClass: 0x48}},
		{"ipv6", v6, ok, &roce.AddressVector{DstMAC: peerMAC, SrcMAC: [6]byte(mac), DstIP: netip.AddrFrom16(ll1), SrcIP: netip.AddrFrom16(ll2),
			HopLimit: 9, TrafficClass: 0xab, FlowLabel: 0x12345}},
		{"no-grh", v4(0, 64, a, b), roce.WC{Opcode: roce.WCRecv, SrcMAC: peerMAC}, nil},
		{"failed", v4(0, 64, a, b), roce.WC{Status: roce.WCLocLenErr, Flags: roce.WCWithGRH}, nil},
		{"multicast", v4(0, 64, a, netip.MustParseAddr("224.0.0.1")), ok, nil},
		{"foreign", v4(0, 64, b, a), ok, nil},
		{"garbage", make([]byte, 40), ok, nil},
	} {
		av, good := UDReplyAV(tc.grh, &tc.wc, gids, mac)
		if good != (tc.want != nil) || good && av != *tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, av, good, tc.want)
		}
	}
}
