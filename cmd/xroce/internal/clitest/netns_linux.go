//go:build linux

// The commands' runs in network namespaces: one in a host's namespace
// (RunIn), a server and its client in a netns.Pair (ClientServer), and
// waiting for a server to listen.

package clitest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/internal/netns"
)

// SyncBuffer is a bytes.Buffer safe for a writer and a reader.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Result is the outcome of one command run in a namespace (RunIn).
type Result struct {
	Err            error
	Stdout, Stderr string
}

// RunIn runs cmd with args, which start with the command's name as Run's
// do, inside h's namespace, in the background; the channel gets its
// Result. As for Run, -h's flag.ErrHelp is no error.
func RunIn(ctx context.Context, h *netns.Host, cmd base.Command, args ...string) <-chan Result {
	c := make(chan Result, 1)
	if len(args) == 0 || args[0] != cmd.Name {
		c <- Result{Err: fmt.Errorf("clitest.RunIn(%s, %q): the arguments must start with the command's name", cmd.Name, args)}
		return c
	}
	go func() {
		var out, errb SyncBuffer
		err := h.Do(func() error { return cmd.Run(ctx, &base.Env{Stdout: &out, Stderr: &errb}, args[1:]) })
		if errors.Is(err, flag.ErrHelp) {
			err = nil
		}
		c <- Result{Err: err, Stdout: out.String(), Stderr: errb.String()}
	}()
	return c
}

// WaitListen waits until a TCP socket listens on port in h's namespace
// or the server (if not nil) ends.
func WaitListen(t *testing.T, h *netns.Host, port int, server <-chan Result) {
	t.Helper()
	deadline := time.Now().Add(Slowdown * 30 * time.Second)
	for time.Now().Before(deadline) {
		if ListensTCP(h, port) {
			return
		}
		if server == nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case r := <-server:
			t.Fatalf("server ended before listening: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("nothing listens on port %d", port)
}

// ListensTCP reports whether a TCP socket listens on port in h's
// namespace.
func ListensTCP(h *netns.Host, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	var found bool
	h.Do(func() error {
		for _, name := range []string{"tcp", "tcp6"} {
			f, err := os.Open("/proc/thread-self/net/" + name)
			if err != nil {
				return err
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
					found = true
				}
			}
			f.Close()
		}
		return nil
	})
	return found
}

// ClientServer runs cmd as a server in p's B (args server) and, once it
// listens on TCP port, as a client in A towards B (args client and B's
// address), and returns both results. Both argument lists start with the
// command's name.
func ClientServer(t *testing.T, p *netns.Pair, port int, cmd base.Command, server, client []string) (rs, rc Result) {
	t.Helper()
	return ClientServerOf(t, p, port, cmd, server, cmd, client)
}

// ClientServerOf is ClientServer for a server and a client of two
// commands, srv and cl (conform's client of perf's server).
func ClientServerOf(t *testing.T, p *netns.Pair, port int, srv base.Command, server []string, cl base.Command, client []string) (rs, rc Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Slowdown*30*time.Second)
	defer cancel()
	sc := RunIn(ctx, p.B, srv, server...)
	WaitListen(t, p.B, port, sc)
	rc = <-RunIn(ctx, p.A, cl, append(client, p.B.IP.String())...)
	if rc.Err != nil {
		cancel()
	}
	rs = <-sc
	return rs, rc
}

// ItersRE matches the line that ibv_rc_pingpong's output, and xroce
// pingpong's, ends with: the iterations and the time per iteration, as
// submatches 1 and 2.
var ItersRE = regexp.MustCompile(`(?m)^(\d+) iters in \d+\.\d\d seconds = (\d+\.\d\d) usec/iter$`)
