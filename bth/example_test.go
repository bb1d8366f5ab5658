package bth_test

import (
	"fmt"
	"net/netip"

	"github.com/xroce/xroce/bth"
)

// Build an RDMA WRITE ONLY frame in place around a payload, then decode it.
func Example() {
	ff := bth.FrameFields{
		DstMAC: [6]byte{0x02, 0, 0, 0, 0, 2},
		SrcMAC: [6]byte{0x02, 0, 0, 0, 0, 1},
		SrcIP:  netip.MustParseAddr("198.18.0.1"),
		DstIP:  netip.MustParseAddr("198.18.0.2"),
		TTL:    64,
		BTH:    bth.BTHFields{Opcode: bth.RCWriteOnly, PKey: 0xffff, DestQP: 0x11, AckReq: true, PSN: 100},
		RETH:   bth.RETHFields{VA: 0x1000, RKey: 0x1234, DMALen: 5},
	}
	buf := make([]byte, 2048)
	copy(buf[ff.HeaderLen():], "hello") // the payload, already in place
	n, err := bth.BuildInPlace(buf, &ff, 5)
	if err != nil {
		panic(err)
	}

	var f bth.Frame
	if err := f.Decode(buf[:n]); err != nil {
		panic(err)
	}
	fmt.Println(n, f.Opcode(), f.SrcIP(), "->", f.DstIP(), "QP", f.BTH.DestQP(), "PSN", f.BTH.PSN())
	fmt.Printf("RETH VA %#x RKey %#x len %d, payload %q pad %d, ICRC ok %v\n",
		f.RETH.VA(), f.RETH.RKey(), f.RETH.DMALen(), f.Payload, f.PadLen, f.VerifyICRC())
	// Output:
	// 82 RC RDMA_WRITE_ONLY 198.18.0.1 -> 198.18.0.2 QP 17 PSN 100
	// RETH VA 0x1000 RKey 0x1234 len 5, payload "hello" pad 3, ICRC ok true
}

// Decode errors name the layer, the reason and the offset.
func ExampleDecodeError() {
	var f bth.Frame
	err := f.Decode(make([]byte, 30))
	fmt.Println(err)
	// Output:
	// decode ethernet at 12: not IPv4 or IPv6
}
