//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xroce/xroce/internal/netns"
)

// row is one line of the table: xroce and TCP side by side.
type row struct {
	what       string
	xroce, tcp result
	tcpErr     error
}

// report measures every MTU and prints the table.
func report(w io.Writer, o options) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "xroce vs TCP on one veth pair, %d CPUs, %s, %v per test; %s\n\n", runtime.NumCPU(), kernel(), o.dur, loadavg())
	for _, mtu := range o.mtus {
		rows, err := measure(exe, mtu, o)
		if err != nil {
			return fmt.Errorf("mtu %d: %w", mtu, err)
		}
		table(w, mtu, rows)
	}
	fmt.Fprintf(w, "\nafter: %s\n", loadavg())
	return nil
}

func kernel() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "linux"
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return "Linux " + string(b)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return "load average " + strings.Join(f[:3], " ")
}

// measure runs the xroce pair, then iperf3 and sockperf, on a new
// namespace pair with the given MTU.
func measure(exe string, mtu int, o options) ([]row, error) {
	p, err := netns.New(netns.Config{MTU: mtu, Queues: 1})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	xs, err := runXroce(exe, p, o)
	if err != nil {
		return nil, err
	}
	if o.latSpin > 0 && (o.only == "" || strings.Contains("lat", o.only)) {
		ol := o
		ol.only, ol.xspin = "lat", o.latSpin
		ls, err := runXroce(exe, p, ol)
		if err != nil {
			return nil, err
		}
		for i := range ls {
			ls[i].Test = "lat-spin"
			ls[i].Spin = o.latSpin.String()
		}
		xs = append(xs, ls...)
	}
	var rows []row
	for _, x := range xs {
		r := row{xroce: x}
		switch x.Test {
		case "write", "send":
			r.what = fmt.Sprintf("RC %s %s", strings.ToUpper(x.Test), size(x.Size))
			if !o.skipTCP {
				r.tcp, r.tcpErr = iperf(p, x.Size, o.dur)
			}
		case "lat":
			r.what = "RC SEND 8 B latency (TCP: 14 B)"
			if !o.skipTCP {
				r.tcp, r.tcpErr = sockperf(p, o.dur)
			}
		case "lat-spin":
			r.what = fmt.Sprintf("same, xroce workers spin %s before sleeping", x.Spin)
			if len(rows) > 0 {
				r.tcp, r.tcpErr = rows[len(rows)-1].tcp, rows[len(rows)-1].tcpErr
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// start starts cmd with its output in buffers and a kill after limit.
func start(cmd *exec.Cmd, limit time.Duration, stdout, stderr *bytes.Buffer) (*time.Timer, error) {
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	return time.AfterFunc(limit, func() { syscall.Kill(pid, syscall.SIGKILL) }), nil
}

// cpuOf is the user plus system time of an ended process (wait4's rusage).
func cpuOf(cmd *exec.Cmd) float64 {
	if cmd.ProcessState == nil {
		return 0
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

func runXroce(exe string, p *netns.Pair, o options) ([]result, error) {
	ctl := p.B.IP.String() + ":18601"
	args := []string{"-ctl", ctl, "-time", o.dur.String(), "-depth", strconv.Itoa(o.depth),
		"-sizes", ints2s(o.sizes), "-lat-iters", strconv.Itoa(o.latIter), "-spin", o.spin.String(), "-xdp-spin", o.xspin.String(), "-attach", o.attach}
	if o.busy {
		args = append(args, "-busy")
	}
	if o.arm {
		args = append(args, "-arm")
	}
	if o.only != "" {
		args = append(args, "-only", o.only)
	}
	n := 2*len(o.sizes) + 1
	limit := time.Duration(n)*(o.dur+5*time.Second) + 30*time.Second
	srv := p.B.Command(exe, append([]string{"-role", "server"}, args...)...)
	srv.Env = append(os.Environ(), "BENCHREPORT_IF="+p.B.Ifname)
	var so, se, co, ce bytes.Buffer
	ts, err := start(srv, limit, &so, &se)
	if err != nil {
		return nil, err
	}
	defer ts.Stop()
	cli := p.A.Command(exe, append([]string{"-role", "client"}, args...)...)
	cli.Env = append(os.Environ(), "BENCHREPORT_IF="+p.A.Ifname)
	tc, err := start(cli, limit, &co, &ce)
	if err != nil {
		syscall.Kill(srv.Process.Pid, syscall.SIGKILL)
		srv.Wait()
		return nil, err
	}
	defer tc.Stop()
	cerr := cli.Wait()
	serr := srv.Wait()
	if cerr != nil || serr != nil {
		return nil, fmt.Errorf("xroce client: %v: %s; server: %v: %s", cerr, strings.TrimSpace(ce.String()), serr, strings.TrimSpace(se.String()))
	}
	var rs []result
	sc := bufio.NewScanner(&co)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("client output %q: %w", sc.Text(), err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func ints2s(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// iperf runs one iperf3 TCP stream from A to B writing size bytes at a
// time for dur.
func iperf(p *netns.Pair, size int, dur time.Duration) (result, error) {
	res := result{Test: "tcp", Size: size}
	port := "5201"
	srv := p.B.Command("iperf3", "-s", "-1", "-B", p.B.IP.String(), "-p", port)
	var so, se, co, ce bytes.Buffer
	limit := dur + 20*time.Second
	ts, err := start(srv, limit, &so, &se)
	if err != nil {
		return res, err
	}
	defer ts.Stop()
	var cli *exec.Cmd
	for try := 0; ; try++ {
		time.Sleep(200 * time.Millisecond)
		co.Reset()
		ce.Reset()
		secs := strconv.FormatFloat(dur.Seconds(), 'f', -1, 64)
		cli = p.A.Command("iperf3", "-c", p.B.IP.String(), "-p", port, "-t", secs, "-l", strconv.Itoa(size), "-J")
		tc, err := start(cli, limit, &co, &ce)
		if err != nil {
			return res, err
		}
		err = cli.Wait()
		tc.Stop()
		if err == nil {
			break
		}
		if try == 5 {
			syscall.Kill(srv.Process.Pid, syscall.SIGKILL)
			srv.Wait()
			return res, fmt.Errorf("iperf3 client: %v: %s %s", err, ce.String(), co.String())
		}
	}
	if err := srv.Wait(); err != nil {
		return res, fmt.Errorf("iperf3 server: %v: %s", err, se.String())
	}
	var j struct {
		End struct {
			SumReceived struct {
				Seconds float64 `json:"seconds"`
				Bytes   float64 `json:"bytes"`
			} `json:"sum_received"`
			SumSent struct {
				Retransmits uint64 `json:"retransmits"`
			} `json:"sum_sent"`
		} `json:"end"`
	}
	if err := json.Unmarshal(co.Bytes(), &j); err != nil {
		return res, fmt.Errorf("iperf3 output: %w", err)
	}
	res.Bytes, res.Seconds = j.End.SumReceived.Bytes, j.End.SumReceived.Seconds
	res.Retrans = j.End.SumSent.Retransmits
	res.CPUA, res.CPUB = cpuOf(cli), cpuOf(srv)
	return res, nil
}

var percentile = regexp.MustCompile(`percentile (\d+\.\d+) =\s+([0-9.]+)`)

// sockperf runs a TCP ping-pong of 14-byte messages (sockperf's smallest:
// its own header) from A to B for dur; it reports half round trips.
func sockperf(p *netns.Pair, dur time.Duration) (result, error) {
	res := result{Test: "tcp-lat", Size: 8}
	port := "11111"
	srv := p.B.Command("sockperf", "server", "--tcp", "-i", p.B.IP.String(), "-p", port)
	var so, se, co, ce bytes.Buffer
	limit := dur + 20*time.Second
	ts, err := start(srv, limit, &so, &se)
	if err != nil {
		return res, err
	}
	defer ts.Stop()
	defer func() {
		syscall.Kill(srv.Process.Pid, syscall.SIGKILL)
		srv.Wait()
	}()
	var cli *exec.Cmd
	for try := 0; ; try++ {
		time.Sleep(200 * time.Millisecond)
		co.Reset()
		ce.Reset()
		secs := strconv.Itoa(max(1, int(dur.Round(time.Second).Seconds())))
		cli = p.A.Command("sockperf", "ping-pong", "--tcp", "-i", p.B.IP.String(), "-p", port, "-m", "14", "-t", secs)
		tc, err := start(cli, limit, &co, &ce)
		if err != nil {
			return res, err
		}
		err = cli.Wait()
		tc.Stop()
		if err == nil {
			break
		}
		if try == 5 {
			return res, fmt.Errorf("sockperf client: %v: %s %s", err, ce.String(), co.String())
		}
	}
	out := co.String() + ce.String()
	for _, m := range percentile.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "50.000":
			res.P50 = v
		case "99.000":
			res.P99 = v
		}
	}
	if res.P50 == 0 {
		return res, fmt.Errorf("sockperf output without percentiles: %s", out)
	}
	return res, nil
}

// table prints the rows of one MTU.
func table(w io.Writer, mtu int, rows []row) {
	ib := 1024
	if mtu >= 4096+80 {
		ib = 4096
	}
	fmt.Fprintf(w, "\n### veth MTU %d (RoCE path MTU %d)\n\n", mtu, ib)
	fmt.Fprintf(w, "| test | xroce | TCP | xroce CPU s/GB (A+B) | TCP CPU s/GB (A+B) | xroce retransmits |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		x, t := r.xroce, r.tcp
		var xs, ts, xc, tcpu string
		if strings.HasPrefix(x.Test, "lat") {
			xs = fmt.Sprintf("p50 %.1f µs, p99 %.1f µs", x.P50, x.P99)
			ts = fmt.Sprintf("p50 %.1f µs, p99 %.1f µs", t.P50, t.P99)
			xc, tcpu = "–", "–"
		} else {
			xs = gbit(x)
			ts = gbit(t)
			xc = fmt.Sprintf("%.2f (%.2f+%.2f)", perGB(x.CPUA+x.CPUB, x.Bytes), perGB(x.CPUA, x.Bytes), perGB(x.CPUB, x.Bytes))
			tcpu = fmt.Sprintf("%.2f (%.2f+%.2f)", perGB(t.CPUA+t.CPUB, t.Bytes), perGB(t.CPUA, t.Bytes), perGB(t.CPUB, t.Bytes))
		}
		if r.tcpErr != nil {
			e, _, _ := strings.Cut(r.tcpErr.Error(), "\n")
			ts, tcpu = "error: "+e, "–"
		} else if t.Test == "" {
			ts, tcpu = "–", "–"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d |\n", r.what, xs, ts, xc, tcpu, x.Retrans)
	}
}

func gbit(r result) string {
	if r.Seconds == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f Gbit/s", r.Bytes*8/r.Seconds/1e9)
}

func perGB(cpu, bytes float64) float64 {
	if bytes == 0 {
		return 0
	}
	return cpu / (bytes / 1e9)
}
