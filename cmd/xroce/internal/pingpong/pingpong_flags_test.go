//go:build linux

package pingpong

import (
	"strings"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
)

// Command-line mistakes of pingpong: exit status 2 and one line saying
// what is wrong, before any device is opened.
func TestPingpongBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong", "-s", "0"}, "-s 0: want 1.."},
		{[]string{"pingpong", "-m", "1500"}, "-m 1500: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"pingpong", "-i", "2"}, "one port"},
		{[]string{"pingpong", "-n", "0"}, "-n 0"},
		{[]string{"pingpong", "a", "b"}, "at most one HOST"},
		{[]string{"pingpong", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"pingpong", "--ts"}, "-t (timestamps) and -j (device memory) are not supported"},
	} {
		_, _, err := clitest.Run(t, Cmd, tc.args...)
		if base.ExitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v (exit %d), want exit 2 and one line with %q", tc.args, err, base.ExitCode(err), tc.want)
		}
	}
}
