//go:build linux

package perf

import (
	"bytes"
	"context"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"strings"
	"testing"
)

// Command-line mistakes of perf: exit status 2 and one line saying what is
// wrong, before any device is opened.
func TestPerfBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"perf"}, "name a test: write_bw, read_bw"},
		{[]string{"perf", "write_rate"}, `unknown test "write_rate"`},
		{[]string{"perf", "write_bw", "-R", "-c", "UC"}, "UC is not supported in librdmacm"},
		{[]string{"perf", "write_bw", "-T", "5"}, "TOS is only valid for rdma_cm QPs: add -R"},
		{[]string{"perf", "write_bw", "-R", "-T", "256"}, "-T 256: want a type of service 0..255"},
		{[]string{"perf", "write_bw", "-R", "--retry_count", "-1"}, "--retry_count -1"},
		{[]string{"perf", "read_bw", "-c", "UC"}, "read_bw needs -c RC"},
		{[]string{"perf", "write_bw", "-c", "UD"}, "write_bw needs -c RC or UC"},
		{[]string{"perf", "send_bw", "-c", "XRC"}, "-c XRC: want RC, UC or UD"},
		{[]string{"perf", "write_lat", "-q", "2"}, "latency tests use one QP"},
		{[]string{"perf", "write_bw", "-q", "16385"}, "-q 16385: want 1..16384 QPs"},
		{[]string{"perf", "qps", "-q", "16,1"}, "want increasing numbers of QPs, 1..16384"},
		{[]string{"perf", "qps", "-s", "0"}, "-s 0: want sizes of 1.."},
		{[]string{"perf", "qps", "-D", "100ms"}, "-D 100ms: want at least 1s"},
		{[]string{"perf", "qps", "198.18.0.2"}, "makes its own link: no HOST"},
		{[]string{"perf", "write_bw", "-D", "5", "-a"}, "-D and -a do not go together"},
		{[]string{"perf", "write_bw", "-m", "9000"}, "-m 9000: want 256"},
		{[]string{"perf", "atomic_bw", "-A", "SWAP"}, "-A SWAP: want FETCH_AND_ADD or CMP_AND_SWAP"},
		{[]string{"perf", "write_bw", "h1", "h2"}, "at most one HOST"},
	} {
		var out, errb bytes.Buffer
		err := runCmd(context.Background(), tc.args, &out, &errb)
		if base.ExitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v (exit %d), want exit 2 and one line with %q", tc.args, err, base.ExitCode(err), tc.want)
		}
	}
}
