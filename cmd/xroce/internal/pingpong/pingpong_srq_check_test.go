//go:build linux

package pingpong

import (
	"slices"
	"testing"
)

// ibv_srq_pingpong -c sends its zero-filled buffer: xroce pingpong --srq -c
// must take it (the interop row xroce.srq.xroce_server failed on page 0).
func TestSRQCheckZeroFill(t *testing.T) {
	o := &pingpongOptions{size: 4097}
	for _, tc := range []struct {
		name string
		fill func(b []byte)
		bad  []int
	}{
		{"srq_pingpong zeros", func(b []byte) { clear(b) }, nil},
		{"rc_pingpong 0x7b", func(b []byte) {
			for i := range b {
				b[i] = 0x7b
			}
			b[0], b[4096] = 0, 0
		}, nil},
		{"xroce pattern", func(b []byte) {
			for i := range b {
				b[i] = ppPattern(i)
			}
		}, nil},
		{"garbage in page 1", func(b []byte) { clear(b); b[4096] = 9 }, []int{1}},
	} {
		buf := make([]byte, o.size)
		tc.fill(buf)
		if got := srqBadPages(&ppSide{o: o, buf: buf}); !slices.Equal(got, tc.bad) {
			t.Errorf("%s: srqBadPages = %v, want %v", tc.name, got, tc.bad)
		}
	}
}
