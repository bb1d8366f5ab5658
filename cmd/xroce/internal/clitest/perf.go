package clitest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// BWLineRE matches a result line of xroce perf's bandwidth tests (and
// perftest's): bytes, iterations, BW peak and average with 2 decimals, or
// 6 when --report_gbits reports under 0.1 Gb/s (perftest's
// REPORT_FMT_EXT), and the message rate.
var BWLineRE = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+(\d+\.\d\d(?:\d{4})?)\s+(\d+\.\d\d(?:\d{4})?)\s+(\d+\.\d{6})$`)

// LatLineRE matches a result line of xroce perf's latency tests: bytes,
// iterations and seven figures in microseconds.
var LatLineRE = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)(\s+\d+\.\d\d){7}\s*$`)

// CCLineRE matches the congestion control line xroce perf prints on
// stderr (read back by perf's tests and by conform --serve's, whose
// client is perf).
var CCLineRE = regexp.MustCompile(`(?m)^perf: congestion control: .*$`)

// CCFig returns the figure after name on the congestion control line in
// stderr, failing t (naming who printed it) if there is none.
func CCFig(t *testing.T, who, stderr, name string) uint64 {
	t.Helper()
	l := CCLineRE.FindString(stderr)
	f := strings.Fields(l)
	for i := range f[:max(len(f)-1, 0)] {
		if f[i] == name {
			v, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				t.Fatalf("%s: %s %q in %q", who, name, f[i+1], l)
			}
			return v
		}
	}
	t.Fatalf("%s: no %s on a congestion control line in stderr:\n%s", who, name, stderr)
	return 0
}
