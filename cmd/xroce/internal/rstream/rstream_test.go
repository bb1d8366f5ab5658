//go:build linux

package rstream

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

// rstream's command line: the options read, the usage and status 1 for a
// bad -T, and librdmacm's size_str and cnt_str.
func TestRstreamFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want rstreamOptions
	}{
		{nil, rstreamOptions{iterations: 1, size: 1000, count: 1000, port: "7471"}},
		{[]string{"-s", "h", "-S", "4096", "-C", "10", "-T", "v", "-T", "b", "-p", "7000"},
			rstreamOptions{dst: "h", iterations: 1, size: 4096, count: 10, custom: true, port: "7000", verify: true}},
		{[]string{"-S", "all", "-T", "socket", "-B", "65536", "-k", "5", "-f", "ip", "-d", "veth0"},
			rstreamOptions{iterations: 1, size: 1000, count: 1000, sizeOption: 1, port: "7471", tcp: true, bufSize: 65536,
				keepalive: 5, numeric: true, ifname: "veth0"}},
		{[]string{"-I", "3", "-Tverify", "-Ta", "-Tn", "-Tr"},
			rstreamOptions{iterations: 3, size: 1000, count: 1000, custom: true, port: "7471", verify: true}},
	} {
		var out bytes.Buffer
		o, _, done := parseRstream(&out, tc.args)
		if done || *o != tc.want || out.Len() != 0 {
			t.Errorf("%q: %+v (done %v, %q), want %+v", tc.args, *o, done, out.String(), tc.want)
		}
	}
	var out bytes.Buffer
	if _, code, done := parseRstream(&out, []string{"-T", "x"}); !done || code != 1 || !strings.HasPrefix(out.String(), "usage: rstream\n") {
		t.Errorf("-T x: done %v, code %d, %q", done, code, out.String())
	}
	for _, tc := range []struct {
		n    int64
		want string
	}{{64, "64"}, {1536, "1.5k"}, {4096, "4k"}, {98304, "96k"}, {1 << 20, "1m"}, {6291456, "6m"}, {3 << 29, "1.5g"}} {
		if got := sizeStr(tc.n, 32); got != tc.want {
			t.Errorf("sizeStr(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := sizeStr(1536, 5) + "_lat"; got != "1.5k_lat" {
		t.Errorf("test name %q", got)
	}
	for n, want := range map[int64]string{999: "999", 1000: "1k", 100000: "100k", 2e6: "2m", 3e9: "3b"} {
		if got := cntStr(n); got != want {
			t.Errorf("cntStr(%d) = %q, want %q", n, got, want)
		}
	}
}

// rstreamLine matches a line of rstream's table for test name.
func rstreamLine(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+\S+\s+\S+\s+\S+\s+\S+\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+$`)
}

// xroce rstream against itself between two namespaces, over rsocket and
// over TCP (-T s), custom tests with verification and the latency suite.
func TestRstream(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	header := "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n"
	for _, tc := range []struct {
		name   string
		args   []string
		lines  []string
		client []string
	}{
		{"custom-verify", []string{"-S", "100000", "-C", "20", "-I", "2", "-T", "v"}, []string{"custom"}, nil},
		{"small-keepalive", []string{"-S", "1", "-C", "300", "-k", "1"}, []string{"custom"}, nil},
		{"tcp", []string{"-T", "s", "-S", "65536", "-C", "50", "-T", "v"}, []string{"custom"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := append([]string{"rstream", "-d", p.B.Ifname}, tc.args...)
			client := append([]string{"rstream", "-s", b}, tc.args...)
			if tc.name == "tcp" {
				// -T s needs no device; the server listens on TCP, which
				// the listen hook does not see: call it once the port
				// listens in B.
				server = server[:1]
				server = append(server, tc.args...)
				cmtest.ListenHook(t)
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					for !clitest.ListensTCP(p.B, 7471) {
						select {
						case <-stop:
							return
						case <-time.After(10 * time.Millisecond):
						}
					}
					rdmacm.Listening()
				}()
			}
			rs, rc := cmServerClient(t, p, server, client, cmtest.ServerLinger)
			for who, r := range map[string]clitest.Result{"server": rs, "client": rc} {
				if base.ExitCode(r.Err) != 0 || !strings.HasPrefix(r.Stdout, header) || r.Stderr != "" {
					t.Errorf("%s: exit %d (%v)\nstdout:\n%s\nstderr:\n%s", who, base.ExitCode(r.Err), r.Err, r.Stdout, r.Stderr)
					continue
				}
				for _, l := range tc.lines {
					if !rstreamLine(l).MatchString(r.Stdout) {
						t.Errorf("%s: no %q line:\n%s", who, l, r.Stdout)
					}
				}
			}
		})
	}
}
