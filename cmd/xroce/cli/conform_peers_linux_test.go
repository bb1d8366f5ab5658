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
	conformcmd "github.com/xroce/xroce/cmd/xroce/internal/conform"
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
			var rep conformcmd.Report
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
			var suite conformcmd.JUnitSuite
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
func conformJSON(t *testing.T, what string, r clitest.Result) conformcmd.Report {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", what, r.Err, r.Stdout, r.Stderr)
	}
	var rep conformcmd.Report
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
