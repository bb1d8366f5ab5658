package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// round is one revision's round as sidebyside.sh prints it, with the
// figures to vary put in by the caller.
func round(rev, writeBW, typical, pingpong string) string {
	return `=== ` + rev + `
== rc write_bw 64KiB, MB/s
 65536      24500            508.59             ` + writeBW + ` 		   0.008137
 65536      24500            508.59             508.59 		   0.008137
== rc send_lat 8B, µs: min max typical avg stdev 99% 99.9%
 8       20000          8.63           4080.11      ` + typical + `     	       19.37       	35.23  		87.49   		280.38 
 8       20000          8.70           2219.71      9.51     	       19.55       	37.94  		89.96   		309.41 
== anchor: Go TCP ping-pong 8B
go-tcp 8 B: 20000 round trips, half RTT p50 17.5 µs p99 61.9 µs
== perf qps -cm: QPs size Gbit/s ratio Jain slowest setup/s timeouts retrans
      1      4096       1.75    1.00x   1.000      1.00        372         0        0
      1     65536       3.91    1.00x   1.000      1.00          -         0        0
== streams
BenchmarkVethPingPong/xroce-2                       	    6715	    349230 ns/op	         0 direct-%	       ` + pingpong + ` µs/roundtrip
BenchmarkVethThroughput/4KiB/xroce-2   	  128706	     17918 ns/op	 228.60 MB/s	         1.829 Gbit/s	         5.739 cpu-s/GB	         0 direct-%	      29 B/op	       0 allocs/op
`
}

func runOn(t *testing.T, args []string, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i, f := range files {
		p := filepath.Join(dir, string(rune('a'+i))+".txt")
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	var out strings.Builder
	if err := run(args, &out); err != nil {
		t.Fatalf("run: %v", err)
	}
	return out.String()
}

// line returns the table line of figure name.
func line(t *testing.T, out, name string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, name+"  ") {
			return l
		}
	}
	t.Fatalf("no line %q in\n%s", name, out)
	return ""
}

func TestCompareMarksMoves(t *testing.T) {
	// Two rounds each in one side-by-side file: old's write_bw 500 and
	// 520 (median 510), new's 300 and 320 (310: worse); latency typical
	// 9.5 vs 12.5 (worse, lower is better); the stream ping-pong 300 vs
	// 150 µs (better).
	f := round("aaa1111", "500", "9.5", "300") + round("bbb2222", "300", "12.5", "150") +
		round("aaa1111", "520", "9.5", "300") + round("bbb2222", "320", "12.5", "150")
	out := runOn(t, nil, f)
	for _, c := range []struct{ name, want string }{
		{"rc write_bw 64 KiB", `510\.0 \(500\.0–520\.0\) +310\.0 \(300\.0–320\.0\) +0\.61× <<`},
		{"rc send_lat 8 B typical", `9\.50 \(9\.50–9\.50\) +12\.5 \(12\.5–12\.5\) +1\.32× <<`},
		{"rc send_lat 8 B 99%", `87\.5.*1\.00×$`},
		{"anchor: Go TCP ping-pong 8 B p50", `17\.5.*1\.00×$`},
		{"perf qps 1 QPs × 4096 B", `1\.75.*1\.00×$`},
		{"CM setup, 1 QPs", `372.*1\.00×$`},
		{"perf qps 1 QPs × 65536 B", `3\.91.*1\.00×$`},
		{"streams: VethPingPong/xroce, µs/roundtrip", `300\.0.*150\.0.*0\.50× >>`},
		{"streams: VethThroughput/4KiB/xroce, Gbit/s", `1\.83.*1\.00×$`},
		{"streams: VethThroughput/4KiB/xroce, cpu-s/GB", `5\.74.*1\.00×$`},
	} {
		if l := line(t, out, c.name); !regexp.MustCompile(c.want).MatchString(l) {
			t.Errorf("%s: %q, want %s", c.name, l, c.want)
		}
	}
	if !strings.Contains(out, "moved by more than 20%: 2 for the worse (<<), 1 for the better (>>); medians of aaa1111's and bbb2222's rounds") {
		t.Errorf("summary line missing or wrong:\n%s", out)
	}
	// The setup rate of a row without one ("-") is no figure.
	if strings.Count(out, "CM setup") != 1 {
		t.Errorf("a '-' setup rate became a figure:\n%s", out)
	}
}

// perfStream is xroce perf stream's output with the ping-pong p50 given.
func perfStream(rev, p50 string) string {
	return `=== ` + rev + `
== perf stream: both protocols beside TCP, in one process
xroce perf stream: 198.18.0.1 -> 198.18.0.2 on xr22357-1a; direct path: off; 2 s per test

 write size   transport         MiB     Gbit/s     cpu-s/GB (both ends)   direct
 4 KiB        xroce             390       1.63                     6.66     0.0%
 4 KiB        rsocket           354       1.48                     7.25     0.0%
 4 KiB        tcp               546       2.29                     5.13        -
              xroce/tcp                  0.71x                    1.30x
              rsocket/tcp                 0.65x                    1.41x
 64 KiB       xroce             540       2.26                     4.76     0.0%
              xroce/tcp                  0.53x                    1.99x

 64 B ping-pong          round trips     p50 µs     p99 µs     avg µs
 xroce                         4608      ` + p50 + `      973.4      450.7
 tcp                          68608       25.3      103.7       29.2
 xroce/tcp                              16.23x
`
}

func TestComparePerfStream(t *testing.T) {
	out := runOn(t, nil, perfStream("aaa1111", "411.0")+perfStream("bbb2222", "82.2"))
	for _, c := range []struct{ name, want string }{
		{"perf stream 4 KiB xroce", `Gbit/s +1\.63 +1\.63 +1\.00×$`},
		{"perf stream 4 KiB rsocket CPU", `s/GB +7\.25 .*1\.00×$`},
		{"perf stream 4 KiB rsocket/tcp", `0\.65 .*1\.00×$`},
		{"perf stream 4 KiB xroce/tcp CPU", `1\.30 .*1\.00×$`},
		{"perf stream 64 KiB xroce/tcp", `0\.53 .*1\.00×$`},
		{"perf stream ping-pong p50 xroce", `µs +411\.0 +82\.2 +0\.20× >>$`},
		{"perf stream ping-pong p50 tcp", `25\.3 .*1\.00×$`},
		{"perf stream ping-pong p50 xroce/tcp", `16\.2 .*1\.00×$`},
	} {
		if l := line(t, out, c.name); !regexp.MustCompile(c.want).MatchString(l) {
			t.Errorf("%s: %q, want %s", c.name, l, c.want)
		}
	}
	if strings.Contains(out, "ping-pong p50 xroce/tcp CPU") || strings.Contains(out, "64 B") {
		t.Errorf("a ping-pong line read as a write size:\n%s", out)
	}
}

func TestCompareTwoFiles(t *testing.T) {
	// The committed record and a new one, each one revision; -old and
	// -new pick them whatever the order found.
	old := "sidebyside: record aaa1111, 2026-12-02T15:00Z, 1 rounds\n" + round("aaa1111", "500", "9.5", "300")
	cur := round("ccc3333-dirty", "505", "9.6", "290")
	out := runOn(t, []string{"-old", "aaa1111", "-new", "ccc3333-dirty"}, cur, old)
	if l := line(t, out, "rc write_bw 64 KiB"); !strings.HasSuffix(l, "1.01×") {
		t.Errorf("write_bw: %q", l)
	}
	if !strings.Contains(out, "0 for the worse (<<), 0 for the better (>>)") {
		t.Errorf("nothing moved, the summary says otherwise:\n%s", out)
	}
}

func TestCompareNeedsTwoRevisions(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "one.txt")
	os.WriteFile(p, []byte(round("aaa1111", "500", "9.5", "300")), 0o644)
	var out strings.Builder
	if err := run([]string{p}, &out); err == nil || !strings.Contains(err.Error(), "need two revisions") {
		t.Fatalf("one revision: err %v", err)
	}
	// A perf stream table cut short after its write size is no figure
	// (and no panic).
	cut := filepath.Join(dir, "cut.txt")
	os.WriteFile(cut, []byte("=== a\n== perf stream\n 4 KiB\n=== b\n== perf stream\n 64 B\n"), 0o644)
	if err := run([]string{cut}, &out); err == nil || !strings.Contains(err.Error(), "need two revisions") {
		t.Fatalf("cut table: err %v", err)
	}
	if err := run(nil, &out); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Fatalf("no file: err %v", err)
	}
	if err := run([]string{filepath.Join(dir, "absent.txt")}, &out); err == nil {
		t.Fatal("a missing file: no error")
	}
}
