package dump

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/capture"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/viz"
)

// expected is what the page of a capture must show: the model's own counts.
type expected struct {
	arrows, gaps, waits, diagrams, rows int
}

func expect(c *viz.Capture) expected {
	e := expected{rows: len(c.Packets)}
	per := make([]int, len(c.Pairs))
	for _, p := range c.Packets {
		if p.Pair < 0 {
			continue
		}
		if per[p.Pair] < viz.MaxArrows {
			e.arrows++
			if p.Missing > 0 {
				e.gaps++
			}
			if p.Marks&viz.MarkRNR != 0 && p.RNRWait > 0 {
				e.waits++
			}
		}
		per[p.Pair]++
	}
	for _, n := range per {
		if n > 0 {
			e.diagrams++
		}
	}
	return e
}

// buildPage reads a capture as dump --html does and returns the model.
func buildPage(t *testing.T, path string) *viz.Capture {
	t.Helper()
	d := capture.NewDumper(io.Discard, capture.Options{Quiet: true})
	d.HTML = capture.NewHTMLPage(filepath.Base(path), "test", nil)
	if err := d.File(path); err != nil {
		t.Fatal(err)
	}
	return d.HTML.Finish()
}

// TestDumpHTMLCaptures draws the real rxe captures: as many arrows as
// packets, the gaps and retransmissions of the lossy one, the CM pair of
// rping.
func TestDumpHTMLCaptures(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		pairs, cm, gaps, again int
	}{
		{"01_rc_pingpong.pcap", 1, 0, 0, 0},
		{"02_ud_pingpong.pcap", 1, 0, 0, 0},
		{"06_atomic_bw.pcap", 1, 0, 0, 0},
		{"09_rping_rdmacm.pcap", 2, 5, 0, 0},
		{"11_read_bw_loss10_resp.pcap", 1, 0, 31, 386}, // gaps: PSNs never seen, not those skipped after a replay
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			page := filepath.Join(dir, "p.html")
			out, _, err := run(t, "dump", "-q", "--html", page, filepath.Join(clitest.Captures, tc.name))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, " ICRC ok") {
				t.Errorf("-q --html printed packet lines")
			}
			s, err := os.ReadFile(page)
			if err != nil {
				t.Fatal(err)
			}
			c := buildPage(t, filepath.Join(clitest.Captures, tc.name))
			marks := map[viz.Mark]int{}
			for _, p := range c.Packets {
				for m := viz.Mark(1); m != 0; m <<= 1 {
					if p.Marks&m != 0 {
						marks[m]++
					}
				}
			}
			if len(c.Pairs) != tc.pairs || marks[viz.MarkCM] != tc.cm || marks[viz.MarkGap] != tc.gaps || marks[viz.MarkRetrans] != tc.again {
				t.Errorf("%d pairs, %d CM, %d gaps, %d sent again; want %d, %d, %d, %d",
					len(c.Pairs), marks[viz.MarkCM], marks[viz.MarkGap], marks[viz.MarkRetrans], tc.pairs, tc.cm, tc.gaps, tc.again)
			}
			if marks[viz.MarkBad]+marks[viz.MarkNAK]+marks[viz.MarkLost] != 0 {
				t.Errorf("marks %v on a capture without bad packets or NAKs", marks)
			}
			if got, want := strings.Count(string(s), `<g class="arrow `), expect(c).arrows; got != want || want != len(c.Packets) {
				t.Errorf("%d arrows, want %d (%d packets)", got, want, len(c.Packets))
			}
		})
	}
}

// chromium is the headless browser the page is tested in.
const chromium = "/usr/bin/chromium"

var selftestRE = regexp.MustCompile(`<div id="selftest"[^>]*>`)

// browse loads a page in headless Chromium and returns what the page's
// script counted (the attributes of its #selftest element) and its text
// (the errors it caught), and fails on console messages.
func browse(t *testing.T, page, fragment string) map[string]string {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("no %s (apt-get install chromium): the page is not tested in a browser", chromium)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	abs, err := filepath.Abs(page)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+t.TempDir(),
		"--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--log-level=0",
		"--virtual-time-budget=2000", "--dump-dom", "file://"+abs+fragment)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	t.Logf("chromium took %v", time.Since(start).Round(time.Millisecond))
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, ":CONSOLE") {
			t.Errorf("console: %s", l)
		}
	}
	dom := stdout.String()
	tag := selftestRE.FindString(dom)
	if tag == "" {
		t.Fatalf("no #selftest in the page chromium dumped (%d bytes)", len(dom))
	}
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`data-(\w+)="([^"]*)"`).FindAllStringSubmatch(tag, -1) {
		got[m[1]] = m[2]
	}
	if got["done"] != "1" {
		t.Errorf("the page's script did not finish: %s", tag)
	}
	if got["errors"] != "0" {
		rest := dom[strings.Index(dom, tag)+len(tag):]
		t.Errorf("script errors: %s", rest[:strings.Index(rest, "</div>")])
	}
	return got
}

// TestDumpHTMLBrowser loads pages in headless Chromium: the script runs
// without errors, the browser shows as many arrows, gap marks, RNR waits,
// diagrams and rows as the model has, and #pkt=N draws that packet's
// headers bit by bit.
func TestDumpHTMLBrowser(t *testing.T) {
	lossy, _ := clitest.LossyCapture(t)
	for _, tc := range []struct {
		name, capture string
		pkt           int
		headers       string // the headers drawn bit by bit
		fields        int    // their boxes
	}{
		{"lossy", lossy, 5, "BTH,AETH,ICRC", 13 + 2 + 1},
		{"rping", filepath.Join(clitest.Captures, "09_rping_rdmacm.pcap"), 1, "BTH,DETH,ICRC", 13 + 3 + 1},
		{"atomic", filepath.Join(clitest.Captures, "06_atomic_bw.pcap"), 1, "BTH,AtomicETH,ICRC", 13 + 4 + 1},
		{"loss10", filepath.Join(clitest.Captures, "11_read_bw_loss10_resp.pcap"), 0, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := filepath.Join(t.TempDir(), "p.html")
			if _, _, err := run(t, "dump", "-q", "--html", page, tc.capture); err != nil && tc.name != "lossy" {
				t.Fatal(err)
			}
			fragment := ""
			if tc.pkt > 0 {
				fragment = fmt.Sprintf("#pkt=%d", tc.pkt)
			}
			got := browse(t, page, fragment)
			t.Logf("page: %v", got)
			want := expect(buildPage(t, tc.capture))
			for k, v := range map[string]int{"arrows": want.arrows, "gaps": want.gaps, "waits": want.waits,
				"diagrams": want.diagrams, "rows": want.rows, "packets": want.rows} {
				if base.Atoi(got[k]) != v {
					t.Errorf("%s: %s, want %d", k, got[k], v)
				}
			}
			selected := 0
			if tc.pkt > 0 {
				selected = 1
			}
			if base.Atoi(got["selected"]) != selected || got["fieldnames"] != tc.headers || base.Atoi(got["fields"]) != tc.fields {
				t.Errorf("#pkt=%d: %s rows selected, headers %q with %s boxes; want %d, %q, %d",
					tc.pkt, got["selected"], got["fieldnames"], got["fields"], selected, tc.headers, tc.fields)
			}
		})
	}
}
