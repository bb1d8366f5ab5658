// Package stat is xroce stat: the counters of running xroce processes, read
// from their internal/statsock sockets.
package stat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/internal/statsock"
)

const statAbout = `
Print the counters of running xroce processes: devices (frames, drops,
retransmissions, NAKs, duplicates, the links' and the XDP program's counters)
and queue pairs (state, work requests posted, completions). Processes that
run devices ('xroce lab', 'xroce perf' and 'xroce perf qps') serve them on
a unix socket in --dir, named after their pid.

Without -p every running process is shown. With -w the counters are printed
again every second, with their rate since the previous print, until Ctrl-C,
until the process ends or for -n rounds. Counters that are zero on every
device are left out unless -a is given.`

const statExamples = `  sudo xroce stat                  # every running xroce process, once
  sudo xroce stat -w -p 4242       # refresh every second
  sudo xroce stat -json | jq .devices[0].counters`

// Cmd is xroce stat.
var Cmd = base.Command{Name: "stat", Summary: "print the counters of running xroce processes (xroce lab, perf)", Run: runStat}

type statOptions struct {
	pid    int
	watch  bool
	rounds int
	all    bool
	json   bool
	dir    string
}

// statMaxRounds bounds -w without -n: an hour of refreshes.
const statMaxRounds = 3600

func runStat(ctx context.Context, e *base.Env, args []string) error {
	var o statOptions
	fs := base.NewFlagSet(e, "stat", "[-p PID] [-w [-n N]] [-a] [-json]", statAbout, statExamples)
	fs.IntVar(&o.pid, "p", 0, "show only the process `PID`")
	fs.BoolVar(&o.watch, "w", false, "print again every second (until Ctrl-C, the process ends or -n rounds)")
	fs.IntVar(&o.rounds, "n", 0, "with -w: stop after `N` rounds (0: at most 3600)")
	fs.BoolVar(&o.all, "a", false, "also the counters that are zero")
	fs.BoolVar(&o.json, "json", false, "print the snapshots as JSON, one per line")
	fs.StringVar(&o.dir, "dir", statsock.DefaultDir, "where the processes' sockets are")
	pos, err := base.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return base.Usagef("stat: unexpected argument %q", pos[0])
	case o.pid < 0:
		return base.Usagef("stat: -p wants a pid")
	case o.rounds < 0 || o.rounds > 0 && !o.watch:
		return base.Usagef("stat: -n wants -w and a count of 1 or more")
	}
	if o.rounds == 0 {
		o.rounds = statMaxRounds
	}
	if !o.watch {
		o.rounds = 1
	}
	procs, err := statProcesses(o)
	if err != nil {
		return err
	}
	prev := map[int]*statsock.Snapshot{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for round := 0; round < o.rounds; round++ {
		if round > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			if !o.json {
				fmt.Fprintln(e.Stdout)
			}
		}
		alive := 0
		for _, p := range procs {
			s, err := statsock.Read(ctx, p.Path)
			if errors.Is(err, statsock.ErrNoProcess) {
				if prev[p.PID] != nil {
					fmt.Fprintf(e.Stdout, "pid %d: ended\n", p.PID)
					prev[p.PID] = nil
				}
				continue
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("stat: pid %d: %w", p.PID, err)
			}
			alive++
			if o.json {
				if err := json.NewEncoder(e.Stdout).Encode(s); err != nil {
					return err
				}
			} else {
				printSnapshot(e.Stdout, s, prev[p.PID], o.all)
			}
			prev[p.PID] = s
		}
		if alive == 0 {
			if round == 0 {
				return fmt.Errorf("stat: no running xroce process answers in %s", o.dir)
			}
			return nil
		}
	}
	return nil
}

// statProcesses lists the processes to show.
func statProcesses(o statOptions) ([]statsock.Process, error) {
	procs, err := statsock.List(o.dir)
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	if o.pid != 0 {
		for _, p := range procs {
			if p.PID == o.pid {
				return []statsock.Process{p}, nil
			}
		}
		return nil, fmt.Errorf("stat: no xroce process %d with counters in %s", o.pid, o.dir)
	}
	if len(procs) == 0 {
		return nil, fmt.Errorf("stat: no running xroce process with counters in %s (start one, e.g. 'xroce lab')", o.dir)
	}
	return procs, nil
}

// printSnapshot prints a snapshot: a table of device counters, one column
// per device, with the rate since prev when given, then the queue pairs.
func printSnapshot(w io.Writer, s, prev *statsock.Snapshot, all bool) {
	up := s.Time.Sub(s.Started).Round(100 * time.Millisecond)
	fmt.Fprintf(w, "xroce %s, pid %d, up %v", s.Command, s.PID, up)
	if s.Phase != "" {
		fmt.Fprintf(w, ", phase %s", s.Phase)
	}
	fmt.Fprintln(w)
	if len(s.Devices) == 0 {
		return
	}
	var dt float64
	if prev != nil {
		dt = s.Time.Sub(prev.Time).Seconds()
	}
	// The counter names in order of first appearance over the devices.
	var names []string
	seen := map[string]bool{}
	for _, d := range s.Devices {
		for _, c := range d.Counters {
			if !seen[c.Name] {
				seen[c.Name] = true
				names = append(names, c.Name)
			}
		}
	}
	const col = 24
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "  %-22s", "device")
	for _, d := range s.Devices {
		fmt.Fprintf(&hdr, " %*s", col, d.Name+" "+d.Addr)
	}
	fmt.Fprintln(w, strings.TrimRight(hdr.String(), " "))
	var where strings.Builder
	fmt.Fprintf(&where, "  %-22s", "")
	for _, d := range s.Devices {
		fmt.Fprintf(&where, " %*s", col, d.Datapath)
	}
	fmt.Fprintln(w, strings.TrimRight(where.String(), " "))
	for _, n := range names {
		var line strings.Builder
		nonzero := false
		fmt.Fprintf(&line, "  %-22s", n)
		for i, d := range s.Devices {
			v, ok := statsock.Lookup(d.Counters, n)
			nonzero = nonzero || v != 0
			cell := "-"
			if ok {
				cell = fmt.Sprint(v)
				if dt > 0 && i < len(prev.Devices) {
					if pv, ok := statsock.Lookup(prev.Devices[i].Counters, n); ok && v > pv {
						cell += " " + rate(float64(v-pv)/dt)
					}
				}
			}
			fmt.Fprintf(&line, " %*s", col, cell)
		}
		if nonzero || all {
			fmt.Fprintln(w, line.String())
		}
	}
	for _, d := range s.Devices {
		for _, q := range d.QPs {
			fmt.Fprintf(w, "  QP %s %-8s %#06x %s %-4s", d.Name, q.Name, q.QPN, q.Type, q.State)
			if q.Peer != "" {
				fmt.Fprintf(w, " -> %s", q.Peer)
			}
			for _, c := range q.Counters {
				switch {
				case c.Name == "rate" && c.Value != 0:
					// The rate the QP is paced at (DCQCN or its
					// limit), bits/s.
					fmt.Fprintf(w, "  rate %s", bitRate(c.Value))
				case c.Value != 0 || all:
					fmt.Fprintf(w, "  %s %d", c.Name, c.Value)
				}
			}
			fmt.Fprintln(w)
		}
	}
}

// bitRate formats a rate in bits/s: 2.50Gb/s, 800.0Mb/s.
func bitRate(v uint64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2fGb/s", float64(v)/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fMb/s", float64(v)/1e6)
	}
	return fmt.Sprintf("%.1fkb/s", float64(v)/1e3)
}

// rate formats a per-second rate briefly: (+1.2k/s).
func rate(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("(+%.1fG/s)", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("(+%.1fM/s)", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("(+%.1fk/s)", v/1e3)
	}
	return fmt.Sprintf("(+%.0f/s)", v)
}
