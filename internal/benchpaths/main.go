// Command benchpaths compares the figures of every user path between two
// revisions from the output of internal/benchreport/sidebyside.sh: RC
// WRITE bandwidth and SEND latency, UD SEND bandwidth, perf qps -cm (rate
// and CM setup rate per QP count), perf stream (both protocols' rates, CPU
// per GB and ping-pong beside TCP's, and their ratios to TCP's), stream's
// and roce's veth benchmarks, the engine's, and the anchors (Go TCP ping-pong, raw UDP GSO/GRO) measured
// in the same rounds.
//
//	go run ./internal/benchpaths FILE...            the first two revisions found
//	go run ./internal/benchpaths -old A -new B FILE...
//
// A file holds rounds ("=== REV" then "== TEST" blocks) of one revision
// (sidebyside.sh -record, such as the committed docs/bench-paths.txt) or of
// two (a side-by-side run). Each figure is the median of its rounds; the
// table gives both medians and new/old, and marks "<<" every figure that
// moved by more than -moved (20%) for the worse and ">>" for the better,
// lower being better for latencies. The anchors' own moves show how much
// of a move is the machine's.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchpaths:", err)
		os.Exit(2)
	}
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("benchpaths", flag.ContinueOnError)
	oldRev := fs.String("old", "", "the old revision (default: the first found)")
	newRev := fs.String("new", "", "the new revision (default: the second found)")
	moved := fs.Float64("moved", 0.2, "mark figures that moved by more than this fraction")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: benchpaths [-old REV] [-new REV] [-moved 0.2] FILE")
	}
	s := newSet()
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = s.parse(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	a, b := *oldRev, *newRev
	if a == "" && len(s.revs) > 0 {
		a = s.revs[0]
	}
	if b == "" {
		for _, r := range s.revs {
			if r != a {
				b = r
				break
			}
		}
	}
	if s.figs[a] == nil || s.figs[b] == nil || a == b {
		return fmt.Errorf("need two revisions with figures; found %v", s.revs)
	}
	return s.compare(w, a, b, *moved)
}

// fig is one figure of one revision: its values, a round each.
type fig struct {
	unit   string
	lower  bool // lower is better
	values []float64
}

// set holds the figures of every revision read, by revision and name, and
// the names in the order first met.
type set struct {
	revs  []string
	names []string
	figs  map[string]map[string]*fig
}

func newSet() *set { return &set{figs: map[string]map[string]*fig{}} }

func (s *set) add(rev, name, unit string, lower bool, v float64) {
	m := s.figs[rev]
	if m == nil {
		m = map[string]*fig{}
		s.figs[rev] = m
		s.revs = append(s.revs, rev)
	}
	f := m[name]
	if f == nil {
		f = &fig{unit: unit, lower: lower}
		m[name] = f
		if !slices.Contains(s.names, name) {
			s.names = append(s.names, name)
		}
	}
	f.values = append(f.values, v)
}

var (
	benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)
	tcpLine   = regexp.MustCompile(`p50 ([0-9.]+) µs p99 ([0-9.]+) µs`)
	udpLine   = regexp.MustCompile(`received ([0-9.]+) Gbit/s`)
)

// parse reads one sidebyside.sh output.
func (s *set) parse(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var rev, test string
	var lines int   // data lines seen in the test
	var size string // perf stream's write size of the lines being read
	for sc.Scan() {
		t := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(t, "=== "):
			rev, test = strings.TrimSpace(t[4:]), ""
			continue
		case strings.HasPrefix(t, "== "):
			test, lines, size = strings.TrimSpace(t[3:]), 0, ""
			continue
		case rev == "" || t == "":
			continue
		}
		f := strings.Fields(t)
		lines++
		switch {
		case strings.HasPrefix(test, "rc write_bw") && lines == 1 && len(f) >= 4:
			s.addNum(rev, "rc write_bw 64 KiB", "MB/s", false, f[3])
		case strings.HasPrefix(test, "rc send_lat") && lines == 1 && len(f) >= 9:
			s.addNum(rev, "rc send_lat 8 B typical", "µs", true, f[4])
			s.addNum(rev, "rc send_lat 8 B 99%", "µs", true, f[7])
		case strings.HasPrefix(test, "ud send_bw") && lines == 1 && len(f) >= 4:
			s.addNum(rev, "ud send_bw 1 KiB (sent)", "MB/s", false, f[3])
		case strings.HasPrefix(test, "anchor: Go TCP"):
			if m := tcpLine.FindStringSubmatch(t); m != nil {
				s.addNum(rev, "anchor: Go TCP ping-pong 8 B p50", "µs", true, m[1])
			}
		case strings.HasPrefix(test, "anchor: raw UDP"):
			if m := udpLine.FindStringSubmatch(t); m != nil {
				s.addNum(rev, "anchor: raw UDP GSO/GRO", "Gbit/s", false, m[1])
			}
		case strings.HasPrefix(test, "perf stream"):
			size = s.addStream(rev, size, f)
		case strings.HasPrefix(test, "perf qps") && len(f) >= 9:
			q := "perf qps " + f[0] + " QPs × " + f[1] + " B"
			s.addNum(rev, q, "Gbit/s", false, f[2])
			if f[6] != "-" {
				s.addNum(rev, "CM setup, "+f[0]+" QPs", "/s", false, f[6])
			}
		default:
			if m := benchLine.FindStringSubmatch(t); m != nil {
				s.addBench(rev, test+": "+strings.TrimPrefix(m[1], "Benchmark"), strings.Fields(m[3]))
			}
		}
	}
	return sc.Err()
}

// addStream takes a line of xroce perf stream's tables (f, its fields)
// and returns the write size the lines after it belong to: per write size
// and transport the rate and CPU per GB, and the xroce/tcp and
// rsocket/tcp ratios of both; per transport the ping-pong's p50, and its
// ratios to TCP's.
func (s *set) addStream(rev, size string, f []string) string {
	switch {
	case len(f) >= 3 && (f[1] == "KiB" || f[1] == "MiB" || f[1] == "B") && f[2] == "ping-pong":
		return "ping-pong"
	case len(f) >= 7 && (f[1] == "KiB" || f[1] == "MiB"):
		size = f[0] + " " + f[1]
		s.addNum(rev, "perf stream "+size+" "+f[2], "Gbit/s", false, f[4])
		s.addNum(rev, "perf stream "+size+" "+f[2]+" CPU", "s/GB", true, f[5])
	case len(f) == 3 && strings.HasSuffix(f[0], "/tcp") && size != "" && size != "ping-pong":
		s.addNum(rev, "perf stream "+size+" "+f[0], "×", false, strings.TrimSuffix(f[1], "x"))
		s.addNum(rev, "perf stream "+size+" "+f[0]+" CPU", "×", true, strings.TrimSuffix(f[2], "x"))
	case len(f) == 2 && strings.HasSuffix(f[0], "/tcp") && size == "ping-pong":
		s.addNum(rev, "perf stream ping-pong p50 "+f[0], "×", true, strings.TrimSuffix(f[1], "x"))
	case len(f) == 5 && size == "ping-pong":
		s.addNum(rev, "perf stream ping-pong p50 "+f[0], "µs", true, f[2])
	}
	return size
}

func (s *set) addNum(rev, name, unit string, lower bool, v string) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return
	}
	s.add(rev, name, unit, lower, x)
}

// addBench takes a benchmark line's value-unit pairs: the rates and
// per-round-trip times, not ns/op or the allocation counts.
func (s *set) addBench(rev, name string, vu []string) {
	for i := 0; i+1 < len(vu); i += 2 {
		unit := vu[i+1]
		switch unit {
		case "Gbit/s", "pkts/s":
			s.addNum(rev, name+", "+unit, unit, false, vu[i])
		case "µs/roundtrip", "cpu-s/GB":
			s.addNum(rev, name+", "+unit, unit, true, vu[i])
		}
	}
}

func median(v []float64) float64 {
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// compare prints the table of a against b.
func (s *set) compare(out io.Writer, a, b string, moved float64) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "figure\tunit\t%s\t%s\tnew/old\n", a, b)
	var worse, better int
	for _, n := range s.names {
		fa, fb := s.figs[a][n], s.figs[b][n]
		if fa == nil || fb == nil {
			continue
		}
		ma, mb := median(fa.values), median(fb.values)
		mark, r := "", 0.0
		if ma != 0 {
			r = mb / ma
			gain := r
			if fa.lower {
				gain = 1 / r
			}
			switch {
			case gain < 1-moved:
				mark, worse = " <<", worse+1
			case gain > 1+moved:
				mark, better = " >>", better+1
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.2f×%s\n", n, fa.unit, vals(fa.values), vals(fb.values), r, mark)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "moved by more than %.0f%%: %d for the worse (<<), %d for the better (>>); medians of %s's and %s's rounds\n",
		moved*100, worse, better, a, b)
	return err
}

// vals prints a figure's median and, with several rounds, its range.
func vals(v []float64) string {
	m := median(v)
	if len(v) == 1 {
		return num(m)
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%s (%s–%s)", num(m), num(lo), num(hi))
}

func num(x float64) string {
	switch {
	case x >= 1000:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}
