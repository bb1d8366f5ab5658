package capture

import (
	"errors"
	"testing"

	"github.com/xroce/xroce/mad"
)

func TestIBTime(t *testing.T) {
	for _, tc := range []struct {
		t    uint8
		want string
	}{{0, "4.1µs"}, {8, "1.05ms"}, {18, "1.07s"}, {20, "4.29s"}, {24, "68.7s"}, {31, "8.8e+03s"}, {255, "8.8e+03s"}} {
		if got := ibTime(tc.t); got != tc.want {
			t.Errorf("ibTime(%d) = %q, want %q", tc.t, got, tc.want)
		}
	}
	if usedLen(nil) != 0 || usedLen([]byte{0, 1, 0}) != 2 {
		t.Error("usedLen")
	}
	if !errors.Is(mad.CMAHeader(nil).Check(), mad.ErrShort) {
		t.Error("CMAHeader(nil).Check")
	}
}
