//go:build linux

// Command benchreport measures xroce against TCP on the same veth pair and
// prints the comparison as a markdown table: RC WRITE and SEND bandwidth for
// 4 KiB, 64 KiB and 1 MiB messages and 8-byte latency (p50, p99) against
// iperf3 (one TCP stream, the same write size) and sockperf (TCP ping-pong),
// with the CPU seconds each spends per GB moved.
//
// Run it as root (it makes two network namespaces joined by a veth pair,
// 198.18.0.1 and 198.18.0.2):
//
//	go run ./internal/benchreport [-mtu 1500,9000] [-time 2s]
//
// Each side runs in its own process inside its namespace (this binary
// re-executed with -role), so the CPU time of each side is its process's
// (getrusage RUSAGE_SELF, or wait4 for iperf3 and sockperf): user and
// system time of every thread, the kernel's copy-mode AF_XDP and veth work
// included when it runs in that process's context. Softirq work that the
// kernel defers to ksoftirqd is counted for neither side.
//
// With BENCHREPORT_PROFILE=dir each xroce side also writes a CPU profile
// and an execution trace of its run into dir (client.cpu, client.trace,
// server.cpu, server.trace).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	mtus    []int
	dur     time.Duration
	sizes   []int
	depth   int
	busy    bool
	latIter int
	skipTCP bool
	only    string
	spin    time.Duration
	arm     bool
	xspin   time.Duration
	latSpin time.Duration
	attach  string
}

func run(args []string) error {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	mtus := fs.String("mtu", "1500,9000", "veth MTUs to measure, comma-separated")
	dur := fs.Duration("time", 2*time.Second, "duration of each measurement (at most 30s)")
	sizes := fs.String("sizes", "4096,65536,1048576", "message sizes of the bandwidth tests")
	depth := fs.Int("depth", 16, "xroce: messages outstanding in the bandwidth tests")
	busy := fs.Bool("busy", false, "xroce: workers busy-poll their links (a core each)")
	latIter := fs.Int("lat-iters", 200000, "most round trips of a latency test")
	skipTCP := fs.Bool("no-tcp", false, "skip iperf3 and sockperf")
	only := fs.String("only", "", "run only tests whose name contains this (write, send, lat)")
	spin := fs.Duration("spin", 0, "xroce latency test: poll the CQ this long before sleeping on it")
	arm := fs.Bool("arm", false, "xroce: sleep on the CQ's armed notification (the device's goroutine receives) instead of in CQ.Wait (the waiting goroutine receives)")
	xspin := fs.Duration("xdp-spin", -1, "xroce: how long the workers' Receive spins on the RX ring before sleeping (roce's default when < 0)")
	latSpin := fs.Duration("lat-xdp-spin", 20*time.Microsecond, "xroce: also measure latency with the workers spinning this long (0: don't)")
	attach := fs.String("attach", "", "xroce: XDP attach mode, driver or generic (default: driver where the driver has it)")
	role := fs.String("role", "", "internal: server or client of the xroce side")
	ctl := fs.String("ctl", "", "internal: control address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := options{dur: *dur, depth: *depth, busy: *busy, latIter: *latIter, skipTCP: *skipTCP, only: *only, spin: *spin, arm: *arm, xspin: *xspin, latSpin: *latSpin, attach: *attach}
	if o.dur <= 0 || o.dur > 30*time.Second {
		return fmt.Errorf("-time %v out of range (0, 30s]", o.dur)
	}
	var err error
	if o.mtus, err = ints(*mtus); err != nil {
		return fmt.Errorf("-mtu: %w", err)
	}
	if o.sizes, err = ints(*sizes); err != nil {
		return fmt.Errorf("-sizes: %w", err)
	}
	switch *role {
	case "server", "client":
		stop, err := startProfile(*role)
		if err != nil {
			return err
		}
		if *role == "server" {
			err = serve(*ctl, o)
		} else {
			err = client(*ctl, o)
		}
		return errors.Join(err, stop())
	case "":
	default:
		return fmt.Errorf("unknown role %q", *role)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: it creates network namespaces and AF_XDP sockets")
	}
	return report(os.Stdout, o)
}

func ints(s string) ([]int, error) {
	var r []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		r = append(r, v)
	}
	return r, nil
}
