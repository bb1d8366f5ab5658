package roce

import (
	"net/netip"
	"testing"
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
