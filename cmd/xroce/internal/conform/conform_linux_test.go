package conform

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/conform"
)

// TestConformExit: any FAIL makes the exit status 1; KNOWN and SKIP do not.
func TestConformExit(t *testing.T) {
	for _, tc := range []struct {
		v    []conform.Verdict
		want int
	}{
		{[]conform.Verdict{conform.Pass, conform.Known, conform.Skip}, 0},
		{[]conform.Verdict{conform.Pass, conform.Fail}, 1},
	} {
		var rs []conform.Result
		for _, v := range tc.v {
			rs = append(rs, conform.Result{Verdict: v})
		}
		if got := base.ExitCode(conformExit(rs)); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.v, got, tc.want)
		}
	}
}

// TestConformUsage: command-line mistakes exit 2; -list lists the checks.
func TestConformUsage(t *testing.T) {
	for _, args := range [][]string{
		{"conform"},
		{"conform", "-d", "x", "198.18.0.2"},
		{"conform", "-d", "x", "--via", "ib_nope_bw", "198.18.0.2"},
		{"conform", "-d", "x", "--via", "ib_write_bw", "-run", "(", "198.18.0.2"},
		{"conform", "-d", "x", "--via", "ib_write_bw", "-denies", "q", "198.18.0.2"},
		{"conform", "-d", "x", "--serve", "ibv_rc_pingpong"},
		{"conform", "-d", "x", "--serve", "ib_write_bw", "198.18.0.2"},
		{"conform", "-d", "x", "--serve", "ib_write_bw", "--via", "ib_write_bw"},
		{"conform", "-d", "x", "--serve", "ib_write_bw", "-peer-retry", "8"},
	} {
		var out, errb strings.Builder
		err := runCmd(context.Background(), args, &out, &errb)
		if base.ExitCode(err) != 2 {
			t.Errorf("%q: exit %d (%v), want 2", args, base.ExitCode(err), err)
		}
	}
	var out strings.Builder
	if err := runCmd(context.Background(), []string{"conform", "-list"}, &out, &out); err != nil || !strings.Contains(out.String(), "resp.psn-gap\n") ||
		!strings.Contains(out.String(), "req.seq-nak\n  checks:   the peer's requester (--serve)") {
		t.Errorf("-list: %v\n%s", err, out.String())
	}
}

// TestConformProfile: -observed writes what -expect reads; a verdict that
// moved, or a check the profile lacks, makes the exit status 1 and is
// named; a malformed profile is a usage error.
func TestConformProfile(t *testing.T) {
	dir := t.TempDir()
	o := conformOptions{tool: conformTools[0]}
	rs := []conform.Result{{Name: "resp.psn-gap", Verdict: conform.Pass}, {Name: "resp.dup-read", Verdict: conform.Skip},
		{Name: "resp.rnr", Verdict: conform.Fail}}
	path := filepath.Join(dir, "p.txt")
	if err := os.WriteFile(path, []byte("# rxe\n"+o.profileOf(rs)), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if o.expected, err = readProfile(path); err != nil {
		t.Fatal(err)
	}
	o.expect = path
	var out strings.Builder
	if err := o.compareProfile(&out, rs); err != nil || !strings.Contains(out.String(), "all 3 checks as expected") {
		t.Errorf("the observed profile against itself: %v, %q", err, out.String())
	}
	rs[0].Verdict = conform.Fail
	rs = append(rs, conform.Result{Name: "resp.new", Verdict: conform.Pass})
	out.Reset()
	err = o.compareProfile(&out, rs)
	if base.ExitCode(err) != 1 || !strings.Contains(out.String(), "2 of 4 checks differ: resp.psn-gap FAIL (expected PASS); resp.new PASS (not in the profile)") {
		t.Errorf("moved verdicts: exit %d, %q", base.ExitCode(err), out.String())
	}
	// Alternatives: either verdict is as expected.
	alt := filepath.Join(dir, "alt.txt")
	os.WriteFile(alt, []byte("via ib_write_bw resp.psn-gap PASS|FAIL\n"), 0o644)
	if o.expected, err = readProfile(alt); err != nil {
		t.Fatal(err)
	}
	for _, v := range []conform.Verdict{conform.Pass, conform.Fail, conform.Skip} {
		out.Reset()
		err := o.compareProfile(&out, []conform.Result{{Name: "resp.psn-gap", Verdict: v}})
		if want := v != conform.Skip; (err == nil) != want {
			t.Errorf("%v against PASS|FAIL: exit %d, %q", v, base.ExitCode(err), out.String())
		}
	}
	if v := v2s(t, o.expected); v != "PASS|FAIL" {
		t.Errorf("alternatives read as %q", v)
	}
	// The same check through another tool or role is another line.
	o.serve = "ib_write_bw"
	out.Reset()
	if err := o.compareProfile(&out, rs[1:2]); base.ExitCode(err) != 1 {
		t.Errorf("serve against a via profile: exit %d, %q", base.ExitCode(err), out.String())
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("via ib_write_bw resp.psn-gap MAYBE\n"), 0o644)
	var so, se strings.Builder
	if err := runCmd(context.Background(), []string{"conform", "-d", "x", "--via", "ib_write_bw", "-expect", bad, "198.18.0.2"}, &so, &se); base.ExitCode(err) != 2 {
		t.Errorf("a malformed profile: exit %d (%v), want 2", base.ExitCode(err), err)
	}
}

// v2s returns a one-line profile's verdicts as written.
func v2s(t *testing.T, p profile) string {
	t.Helper()
	for _, vs := range p {
		return verdicts(vs)
	}
	return ""
}

// TestConformRxeProfiles: the interop suite's profiles of rxe parse, and
// name only checks and tools that exist, each check in its role.
func TestConformRxeProfiles(t *testing.T) {
	files, _ := filepath.Glob("../../../../interop/testdata/conform-*.txt")
	if len(files) == 0 {
		t.Fatal("no interop/testdata/conform-*.txt")
	}
	for _, f := range files {
		p, err := readProfile(f)
		if err != nil {
			t.Fatal(err)
		}
		for k := range p {
			fs := strings.Fields(k)
			c := slices.IndexFunc(conform.Checks(), func(c *conform.Check) bool { return c.Name == fs[2] })
			tool := slices.ContainsFunc(conformTools, func(t conformTool) bool { return t.name == fs[1] })
			if c < 0 || !tool || conform.Checks()[c].IsRequester() != (fs[0] == "serve") || fs[0] == "serve" && !slices.Contains(conformServeTools, fs[1]) {
				t.Errorf("%s: %q: no such check, tool or role", f, k)
			}
		}
	}
}
