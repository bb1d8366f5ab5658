package stat

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/statsock"
)

// fakeStat serves a snapshot whose rx_frames grows by 100 per read.
func fakeStat(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var n uint64
	s, err := statsock.Listen(dir, func() *statsock.Snapshot {
		n += 100
		return &statsock.Snapshot{PID: os.Getpid(), Command: "lab", Phase: "tour", Started: time.Now().Add(-time.Second),
			Devices: []statsock.Device{
				{Name: "A", Addr: "198.18.0.1", Datapath: "af_xdp copy", Counters: []statsock.Counter{{Name: "rx_frames", Value: n}, {Name: "timeouts"}},
					QPs: []statsock.QP{{Name: "rc", QPN: 0x11, Type: "RC", State: "RTS", Peer: "B 198.18.0.2 0x11",
						Counters: []statsock.Counter{{Name: "posted", Value: 5}}}}},
				{Name: "B", Addr: "198.18.0.2", Datapath: "af_xdp copy", Counters: []statsock.Counter{{Name: "rx_frames", Value: 2 * n}, {Name: "timeouts"}}},
			}}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return dir
}

func TestStat(t *testing.T) {
	dir := fakeStat(t)
	out, _, err := clitest.Run(t, Cmd, "stat", "--dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"xroce lab, pid ", "phase tour", "A 198.18.0.1", "af_xdp copy",
		"rx_frames", " 100 ", " 200", "QP A rc", "0x000011 RC RTS", "-> B 198.18.0.2 0x11", "posted 5"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "timeouts") {
		t.Errorf("a counter zero everywhere is shown without -a:\n%s", out)
	}
	out, _, _ = clitest.Run(t, Cmd, "stat", "--dir", dir, "-a")
	if !strings.Contains(out, "timeouts") {
		t.Errorf("-a: no timeouts line:\n%s", out)
	}
}

func TestStatWatch(t *testing.T) {
	dir := fakeStat(t)
	start := time.Now()
	out, _, err := clitest.Run(t, Cmd, "stat", "--dir", dir, "-p", strconv.Itoa(os.Getpid()), "-w", "-n", "2")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "xroce lab, pid"); n != 2 {
		t.Errorf("%d snapshots printed, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "(+") || time.Since(start) < 900*time.Millisecond {
		t.Errorf("no rate in the second round, or no second's wait (%v):\n%s", time.Since(start), out)
	}
}

func TestStatJSON(t *testing.T) {
	dir := fakeStat(t)
	out, _, err := clitest.Run(t, Cmd, "stat", "--dir", dir, "-json")
	if err != nil {
		t.Fatal(err)
	}
	var s statsock.Snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if s.PID != os.Getpid() || len(s.Devices) != 2 {
		t.Errorf("snapshot %+v", s)
	}
}

func TestStatNothing(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := clitest.Run(t, Cmd, "stat", "--dir", dir); base.ExitCode(err) != 1 {
		t.Errorf("no process: %v, want exit 1", err)
	}
	if _, _, err := clitest.Run(t, Cmd, "stat", "--dir", fakeStat(t), "-p", "1"); base.ExitCode(err) != 1 {
		t.Errorf("absent pid: %v, want exit 1", err)
	}
	for _, args := range [][]string{{"stat", "-n", "3"}, {"stat", "-p", "-4"}, {"stat", "x"}, {"stat", "-bogus"}} {
		if _, _, err := clitest.Run(t, Cmd, args...); base.ExitCode(err) != 2 {
			t.Errorf("%q: %v, want exit 2", args, err)
		}
	}
}
