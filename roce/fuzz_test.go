package roce

import (
	"net/netip"
	"testing"

	"github.com/xroce/xroce/bth"
)

// FuzzCodecs: Unmarshal never panics, and what it accepts marshals back to
// the same message.
func FuzzCodecs(f *testing.F) {
	for _, c := range []Codec{PingpongCodec, XroceCodec} {
		b := make([]byte, c.Size())
		c.Marshal(b, Endpoint{QPN: 0x123456, PSN: 0xabcdef, GID: netip.MustParseAddr("::ffff:198.18.0.1"), MTU: MTU1024, RKey: 0x1ff, Addr: 1 << 40, QKey: 7})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		for _, c := range []Codec{PingpongCodec, XroceCodec} {
			e, err := c.Unmarshal(msg)
			if err != nil || len(msg) < c.Size() {
				continue
			}
			b := make([]byte, c.Size())
			c.Marshal(b, e)
			e2, err := c.Unmarshal(b)
			if err != nil || e2 != e {
				t.Fatalf("%q → %+v → %q → %+v, %v", msg, e, b, e2, err)
			}
		}
	})
}

// destQPN finds the BTH's destination QP in real frames and never reads
// past the end of a truncated one.
func TestDestQPN(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		ff := bth.FrameFields{SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2")}
		if v6 {
			ff.SrcIP, ff.DstIP = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
		}
		ff.BTH.Opcode = bth.RCSendOnly
		ff.BTH.DestQP = 0xabcdef
		buf := make([]byte, 256)
		n, err := bth.BuildInPlace(buf, &ff, 0)
		if err != nil {
			t.Fatal(err)
		}
		frame := buf[:n]
		if q, ok := destQPN(frame); !ok || q != 0xabcdef {
			t.Fatalf("v6 %v: destQPN = %#x, %v", v6, q, ok)
		}
		for i := range len(frame) {
			destQPN(frame[:i:i]) // must not panic
		}
	}
}

func FuzzDestQPN(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0, 0, 0, 0x86, 0xdd})
	f.Fuzz(func(t *testing.T, b []byte) { destQPN(b[:len(b):len(b)]) })
}
