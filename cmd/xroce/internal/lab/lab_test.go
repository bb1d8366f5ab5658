package lab

import (
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
)

// run runs xroce lab with args, which start with "lab".
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return clitest.Run(t, Cmd, args...)
}

func TestLabBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "--no-such-flag"},
		{"lab", "extra"},
		{"lab", "--duration", "-1s"},
		{"lab", "--duration", "2m"},
		{"lab", "--sizes", ""},
		{"lab", "--sizes", "64,x"},
		{"lab", "--sizes", "8M"},
		{"lab", "--size", "0"},
		{"lab", "--mtu", "100"},
		{"lab", "--queues", "0"},
		{"lab", "--loss", "0.9"},
		{"lab", "--loss", "abc"},
		{"lab", "--trace", "-1"},
	} {
		_, _, err := run(t, args...)
		if base.ExitCode(err) != 2 {
			t.Errorf("%q: %v (exit %d), want a usage error (exit 2)", args, err, base.ExitCode(err))
		}
	}
}

func TestLabFlagValues(t *testing.T) {
	var sizes []int
	if err := (sizesFlag{&sizes}).Set("64, 4k,1M"); err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 3 || sizes[0] != 64 || sizes[1] != 4096 || sizes[2] != 1<<20 {
		t.Errorf("sizes %v, want [64 4096 1048576]", sizes)
	}
	var p float64
	for in, want := range map[string]float64{"0.1": 0.1, "10%": 0.1, "0": 0} {
		if err := (lossFlag{&p}).Set(in); err != nil || p != want {
			t.Errorf("loss %q = %v, %v; want %v", in, p, err, want)
		}
	}
}

func TestFormats(t *testing.T) {
	if got := gbits(1e9/8, time.Second); got != "1.00 Gbit/s" {
		t.Errorf("gbits = %q", got)
	}
}

func TestLabHTMLNeedsPcap(t *testing.T) {
	if _, _, err := run(t, "lab", "--pcap", "none", "--html", "x.html"); base.ExitCode(err) != 2 {
		t.Errorf("lab --pcap none --html: %v, want a usage error", err)
	}
}
