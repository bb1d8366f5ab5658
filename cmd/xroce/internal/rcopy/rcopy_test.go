//go:build linux

package rcopy

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// xroce rcopy against itself: a file of 3 MiB and an empty one arrive
// intact with the source's mode; the server serves -n 2 clients and ends.
func TestRcopy(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	dir := t.TempDir()
	src, empty := filepath.Join(dir, "src"), filepath.Join(dir, "empty")
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i*31 + i>>9)
	}
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	listened := cmtest.ListenHook(t)
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	sc := runIn(ctx, p.B, "rcopy", "-d", p.B.Ifname, "-n", "2")
	<-listened
	for _, f := range []struct{ src, dst string }{{src, filepath.Join(dir, "dst")}, {empty, filepath.Join(dir, "dst-empty")}} {
		rc := <-runIn(ctx, p.A, "rcopy", f.src, p.B.IP.String()+":"+f.dst)
		if base.ExitCode(rc.Err) != 0 || !regexp.MustCompile(`^opening\.\.\.transferring\.\.\.closing\.\.\.done\n\d+ bytes in [0-9.]+ seconds = [0-9.]+ Gb/sec\n$`).MatchString(rc.Stdout) {
			t.Fatalf("client: exit %d (%v)\nstdout:\n%s\nstderr:\n%s", base.ExitCode(rc.Err), rc.Err, rc.Stdout, rc.Stderr)
		}
		want, _ := os.ReadFile(f.src)
		got, err := os.ReadFile(f.dst)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, %v; want %d", f.dst, len(got), err, len(want))
		}
		si, _ := os.Stat(f.src)
		if di, _ := os.Stat(f.dst); di.Mode() != si.Mode() {
			t.Errorf("%s: mode %v, want %v", f.dst, di.Mode(), si.Mode())
		}
	}
	rs := <-sc
	if base.ExitCode(rs.Err) != 0 || strings.Count(rs.Stdout, "closing...done\n") != 2 {
		t.Fatalf("server: exit %d (%v)\nstdout:\n%s\nstderr:\n%s", base.ExitCode(rs.Err), rs.Err, rs.Stdout, rs.Stderr)
	}
	// A source that does not exist: the client says so and fails.
	rc := <-runIn(ctx, p.A, "rcopy", filepath.Join(dir, "nope"), p.B.IP.String())
	if base.ExitCode(rc.Err) == 0 {
		t.Fatalf("missing source: exit 0\n%s", rc.Stdout)
	}
}
