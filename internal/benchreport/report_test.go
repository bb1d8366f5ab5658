//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSize(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{8, "8 B"}, {4096, "4 KiB"}, {65536, "64 KiB"}, {1 << 20, "1 MiB"}, {1500, "1500 B"}} {
		if got := size(c.n); got != c.want {
			t.Errorf("size(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestInts(t *testing.T) {
	v, err := ints("4096, 65536,1048576")
	if err != nil || len(v) != 3 || v[2] != 1<<20 {
		t.Fatalf("ints = %v, %v", v, err)
	}
	for _, bad := range []string{"", "x", "0", "-1", "1,,2"} {
		if _, err := ints(bad); err == nil {
			t.Errorf("ints(%q) accepted", bad)
		}
	}
}

// The lines of sockperf 3.7's ping-pong summary that sockperf() reads.
func TestSockperfPercentiles(t *testing.T) {
	out := `sockperf: ---> <MAX> observation =   75.113
sockperf: ---> percentile 99.999 =   75.113
sockperf: ---> percentile 99.000 =   23.184
sockperf: ---> percentile 50.000 =    7.021
sockperf: ---> <MIN> observation =    5.660`
	got := map[string]string{}
	for _, m := range percentile.FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	if got["50.000"] != "7.021" || got["99.000"] != "23.184" {
		t.Fatalf("percentiles %v", got)
	}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	table(&b, 9000, []row{
		{what: "RC WRITE 1 MiB", xroce: result{Test: "write", Bytes: 1e9, Seconds: 1, CPUA: 1, CPUB: 0.5},
			tcp: result{Test: "tcp", Bytes: 2e9, Seconds: 1, CPUA: 0.5, CPUB: 0.5}},
		{what: "RC SEND 8 B latency", xroce: result{Test: "lat", P50: 10, P99: 20}, tcp: result{Test: "tcp-lat", P50: 7, P99: 9}},
	})
	s := b.String()
	for _, want := range []string{"MTU 9000 (RoCE path MTU 4096)", "| RC WRITE 1 MiB | 8.00 Gbit/s | 16.00 Gbit/s | 1.50 (1.00+0.50) | 0.50 (0.25+0.25) | 0 |",
		"p50 10.0 µs, p99 20.0 µs | p50 7.0 µs, p99 9.0 µs"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}
