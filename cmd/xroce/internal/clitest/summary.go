package clitest

import (
	"regexp"
	"strconv"
	"testing"
)

// summaryRE matches the first line of dump's summary for a capture of RoCE
// v2 frames only.
var summaryRE = regexp.MustCompile(`(?m)^(\d+) packets: (\d+) RoCE v2, (\d+) other \(skipped\), (\d+) malformed; ICRC: (\d+) ok, (\d+) bad$`)

// Summary is the counts of that line: packets, RoCE v2 ones, others
// skipped, malformed ones, and the RoCE packets with a good and a bad ICRC.
type Summary struct{ Packets, RoCE, Other, Malformed, OK, Bad int }

// ParseSummary reads the summary line of xroce dump's output (or of the
// capture xroce lab prints the same way), failing t if out has none.
func ParseSummary(t *testing.T, out string) Summary {
	t.Helper()
	m := summaryRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line in output:\n%s", out)
	}
	n := make([]int, 6)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return Summary{n[0], n[1], n[2], n[3], n[4], n[5]}
}
