package cli

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xroce/xroce/bth"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/conform"
	"github.com/xroce/xroce/internal/netns"
)

// TestConformXroce runs xroce conform against xroce itself between two
// namespaces: xroce perf write_bw (or read_bw) as the device under test,
// with enough QPs for every check. Each check passes, cannot run on that
// tool (SKIP), or fails in the way docs/conform.md lists (KNOWN).
func TestConformXroce(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	for i, tc := range []struct {
		test  string
		flags []string
	}{
		{"write_bw", nil},
		{"read_bw", []string{"-grants", "r,w", "-run", "read|zero|rd-atomic"}},
		{"atomic_bw", []string{"-run", "atomic"}},
		{"write_bw", []string{"-run", "psn-gap", "-v"}},
	} {
		t.Run(tc.test, func(t *testing.T) {
			port := 18700 + i
			dir := t.TempDir()
			srv := []string{"perf", "-d", p.B.Ifname, tc.test, "-p", fmt.Sprint(port), "-q", "24", "-n", "1000000", "-timeout", "20s", "-stat-dir", ""}
			verbose := slices.Contains(tc.flags, "-v")
			cli := append([]string{"conform", "-d", p.A.Ifname, "--via", "ib_" + tc.test, "-q", "24", "-p", fmt.Sprint(port),
				"-junit", filepath.Join(dir, "junit.xml"), "-pcap", filepath.Join(dir, "conform.pcap")}, tc.flags...)
			if !verbose {
				cli = append(cli, "-json")
			}
			rs, rc := clientServer(t, p, port, srv, cli)
			if rc.Err != nil {
				t.Fatalf("conform: %v\nstdout:\n%s\nstderr:\n%s", rc.Err, rc.Stdout, rc.Stderr)
			}
			if rs.Err != nil {
				t.Errorf("server: %v\nstdout:\n%s\nstderr:\n%s", rs.Err, rs.Stdout, rs.Stderr)
			}
			if verbose {
				// The table and the check's packets, drawn as the lab does.
				for _, want := range []string{"device under test 198.18.0.2", "RC ACKNOWLEDGE PSN", "NAK PSN sequence error", "-->|", "|<--",
					"1 checks: 1 PASS, 0 FAIL, 0 KNOWN, 0 SKIP"} {
					if !strings.Contains(rc.Stdout, want) {
						t.Errorf("-v output lacks %q:\n%s", want, rc.Stdout)
					}
				}
				t.Logf("-v:\n%s", rc.Stdout)
				return
			}
			var rep conformReport
			if err := json.Unmarshal([]byte(rc.Stdout), &rep); err != nil {
				t.Fatalf("-json output: %v\n%s", err, rc.Stdout)
			}
			t.Logf("progress:\n%s", rc.Stderr)
			for _, r := range rep.Results {
				t.Logf("%-26s %-5v %s %s", r.Name, r.Verdict, r.Observed, r.Note)
				if r.Verdict == conform.Fail {
					t.Errorf("%s: FAIL against xroce: %s", r.Name, r.Observed)
				}
			}
			if len(rep.Results) == 0 {
				t.Fatal("no results")
			}
			var suite junitSuite
			b, err := os.ReadFile(filepath.Join(dir, "junit.xml"))
			if err == nil {
				err = xml.Unmarshal(b, &suite)
			}
			if err != nil || suite.Tests != len(rep.Results) || suite.Failures != 0 {
				t.Errorf("junit: %v, %d tests, %d failures", err, suite.Tests, suite.Failures)
			}
			checkConformPcap(t, filepath.Join(dir, "conform.pcap"))
		})
	}
}

// conformJSON returns the report of a run of xroce conform -json (what
// names it in the failure), failing t if the run failed or its output is
// not the report.
func conformJSON(t *testing.T, what string, r clitest.Result) conformReport {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", what, r.Err, r.Stdout, r.Stderr)
	}
	var rep conformReport
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("%s: -json output: %v\n%s", what, err, r.Stdout)
	}
	return rep
}

// checkConformPcap checks that the pcap holds RoCE frames both ways.
func checkConformPcap(t *testing.T, path string) {
	t.Helper()
	frames, err := readPcapFrames(path)
	if err != nil {
		t.Fatalf("pcap: %v", err)
	}
	var n int
	var f bth.Frame
	for _, b := range frames {
		if f.Decode(b) == nil {
			n++
		}
	}
	if n < 4 {
		t.Errorf("pcap: %d RoCE frames of %d", n, len(frames))
	}
}

// TestConformSendTools runs xroce conform against the tools whose server
// posts receives (xroce perf send_bw, xroce pingpong): their exchanges,
// and the checks about receives. Those servers end with an error once
// their QP is in the error state, as perftest's and rdma-core's do.
func TestConformSendTools(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	for i, tc := range []struct {
		via, run string
		srv      []string
	}{
		{"ib_send_bw", "dup-reack|msn|send-too-long", []string{"perf", "send_bw", "-q", "4", "-s", "4096", "-n", "1000000", "-timeout", "20s", "-stat-dir", ""}},
		// One QP per run of the server: one check here.
		{"ibv_rc_pingpong", "msn", []string{"pingpong", "-g", "1", "-n", "1000000"}},
		{"ibv_ud_pingpong", "ud-qkey", []string{"pingpong", "--ud", "-g", "1", "-s", "1000", "-n", "1000000"}},
	} {
		t.Run(tc.via, func(t *testing.T) {
			port := 18720 + i
			srv := append(append([]string{}, tc.srv...), "-d", p.B.Ifname, "-p", fmt.Sprint(port))
			cli := []string{"conform", "-d", p.A.Ifname, "--via", tc.via, "-q", "4", "-s", "4096", "-p", fmt.Sprint(port),
				"-run", tc.run, "-json"}
			// The servers do not end by themselves here (their QPs were
			// not driven as their clients would): stop them.
			ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*30*time.Second)
			defer cancel()
			sc := runIn(ctx, p.B, srv...)
			clitest.WaitListen(t, p.B, port, sc)
			rc := <-runIn(ctx, p.A, append(cli, p.B.IP.String())...)
			cancel()
			<-sc
			rep := conformJSON(t, "conform", rc)
			for _, r := range rep.Results {
				t.Logf("%-26s %-5v %s %s", r.Name, r.Verdict, r.Observed, r.Note)
				if r.Verdict != conform.Pass {
					t.Errorf("%s: %v against xroce: %s", r.Name, r.Verdict, r.Observed)
				}
			}
			if want := strings.Count(tc.run, "|") + 1; len(rep.Results) != want {
				t.Errorf("%d results, want %d", len(rep.Results), want)
			}
		})
	}
}

// readPcapFrames returns the frames of a pcap file.
func readPcapFrames(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, err
	}
	var frames [][]byte
	for range 1 << 20 {
		b, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		frames = append(frames, b)
	}
	return frames, nil
}

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
		if got := ExitCode(conformExit(rs)); got != tc.want {
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
		err := Run(context.Background(), args, &out, &errb)
		if ExitCode(err) != 2 {
			t.Errorf("%q: exit %d (%v), want 2", args, ExitCode(err), err)
		}
	}
	var out strings.Builder
	if err := Run(context.Background(), []string{"conform", "-list"}, &out, &out); err != nil || !strings.Contains(out.String(), "resp.psn-gap\n") ||
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
	if ExitCode(err) != 1 || !strings.Contains(out.String(), "2 of 4 checks differ: resp.psn-gap FAIL (expected PASS); resp.new PASS (not in the profile)") {
		t.Errorf("moved verdicts: exit %d, %q", ExitCode(err), out.String())
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
			t.Errorf("%v against PASS|FAIL: exit %d, %q", v, ExitCode(err), out.String())
		}
	}
	if v := v2s(t, o.expected); v != "PASS|FAIL" {
		t.Errorf("alternatives read as %q", v)
	}
	// The same check through another tool or role is another line.
	o.serve = "ib_write_bw"
	out.Reset()
	if err := o.compareProfile(&out, rs[1:2]); ExitCode(err) != 1 {
		t.Errorf("serve against a via profile: exit %d, %q", ExitCode(err), out.String())
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("via ib_write_bw resp.psn-gap MAYBE\n"), 0o644)
	var so, se strings.Builder
	if err := Run(context.Background(), []string{"conform", "-d", "x", "--via", "ib_write_bw", "-expect", bad, "198.18.0.2"}, &so, &se); ExitCode(err) != 2 {
		t.Errorf("a malformed profile: exit %d (%v), want 2", ExitCode(err), err)
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
	files, _ := filepath.Glob("../../../interop/testdata/conform-*.txt")
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

// TestConformRping runs the responder checks against xroce's rping -s -P
// over RDMA CM: the puppet connects its QP itself (REQ, REP, RTU), a
// connection per check. rping's server offers its 16-byte receive and no
// region it names, so the check about receives runs and passes, and the
// others are SKIPped without a connection.
func TestConformRping(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	sc, stop := startServer(t, p.B, cmtest.ListenHook(t), "rping", "-s", "-P", "-a", p.B.IP.String(), "-p", "7190")
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	rc := <-runIn(ctx, p.A, "conform", "-d", p.A.Ifname, "--via", "rping", "-p", "7190", "-json", p.B.IP.String())
	stop()
	<-sc
	rep := conformJSON(t, "conform", rc)
	t.Logf("progress:\n%s", rc.Stderr)
	got := map[string]conform.Verdict{}
	for _, r := range rep.Results {
		t.Logf("%-26s %-5v %s", r.Name, r.Verdict, r.Observed)
		got[r.Name] = r.Verdict
	}
	for name, want := range map[string]conform.Verdict{
		"resp.send-too-long": conform.Pass, // a 17-byte SEND into the 16-byte receive
		"resp.psn-gap":       conform.Skip, // no WRITE region, a receive too short to probe with
		"resp.dup-read":      conform.Skip,
		"resp.ud-qkey":       conform.Skip,
	} {
		if got[name] != want {
			t.Errorf("%s: %v, want %v", name, got[name], want)
		}
	}
	for _, r := range rep.Results {
		if r.Verdict == conform.Fail {
			t.Errorf("%s: FAIL against xroce's rping: %s", r.Name, r.Observed)
		}
	}
}
