//go:build linux

package cmtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/roce"
)

// ListenHook makes the tools signal on the returned channel each time one
// listens, for the rest of the test.
func ListenHook(t *testing.T) <-chan struct{} {
	t.Helper()
	c := make(chan struct{}, 16)
	t.Cleanup(rdmacm.SetListenHook(func() { c <- struct{}{} }))
	return c
}

// ServerLinger is how long CMServerClient's callers let a server end on
// its own once its client is done (it has then seen the client's DREQ or
// the end of its data, and needs only to tear down): long enough for a
// busy machine, so that only a server that would not end is cancelled.
const ServerLinger = 30 * time.Second

// CMServerClient runs srv with server (its arguments, from its name)
// in B, waits until it listens, runs cl with client in A and returns both
// results. The server is cancelled once the client is done if it has not
// ended within linger.
func CMServerClient(t *testing.T, p *netns.Pair, srv base.Command, server []string, cl base.Command, client []string, linger time.Duration) (rs, rc clitest.Result) {
	t.Helper()
	listened := ListenHook(t)
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	sc := clitest.RunIn(sctx, p.B, srv, server...)
	select {
	case <-listened:
	case r := <-sc:
		t.Fatalf("%q ended before listening: %v\nstdout:\n%s\nstderr:\n%s", server, r.Err, r.Stdout, r.Stderr)
	case <-ctx.Done():
		t.Fatalf("%q never listened", server)
	}
	rc = <-clitest.RunIn(ctx, p.A, cl, client...)
	select {
	case rs = <-sc:
	case <-time.After(linger):
		scancel()
		rs = <-sc
	}
	return rs, rc
}

// WantRun checks a run's exit status and its exact stdout and stderr.
func WantRun(t *testing.T, who string, r clitest.Result, code int, stdout, stderr string) {
	t.Helper()
	if got := base.ExitCode(r.Err); got != code || r.Stdout != stdout || r.Stderr != stderr {
		t.Errorf("%s: exit %d (%v), want %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s\nwant:\n%s", who, got, r.Err, code, r.Stdout, stdout, r.Stderr, stderr)
	}
}

// OpenCMIn opens the device of h's interface and its CM agent, closed
// when the test ends.
func OpenCMIn(t *testing.T, h *netns.Host) *rdmacm.Device {
	t.Helper()
	var d *rdmacm.Device
	if err := h.Do(func() (err error) { d, err = rdmacm.Open(os.Stderr, "test", h.Ifname); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// NewRCQP makes an RC QP on d, with a CQ of 16 entries for both queues,
// and returns it and its PD.
func NewRCQP(d *rdmacm.Device) (*roce.PD, *roce.QP, error) {
	pd, err := d.Dev.AllocPD()
	if err != nil {
		return nil, nil, err
	}
	cq, err := d.Dev.CreateCQ(16)
	if err != nil {
		return nil, nil, err
	}
	qp, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
	return pd, qp, err
}

// ShortPeerTimeout makes rdmacm.PeerTimeout one second until the test ends.
func ShortPeerTimeout(t *testing.T) {
	t.Cleanup(rdmacm.SetPeerTimeout(time.Second))
}

// gaveUpLimit bounds how long a tool may take to give up on a silent or
// missing peer under ShortPeerTimeout, from its start: its waits are then
// a second or two, and a busy machine may stretch them and the setup
// around them many times over; a tool that waited the default
// rdmacm.PeerTimeout (30 s, and twice that to connect) or for ever instead
// runs past it.
const gaveUpLimit = 30 * time.Second

// CheckGaveUp fails t when a run that began at start took gaveUpLimit or
// longer to give up.
func CheckGaveUp(t *testing.T, what string, start time.Time) {
	t.Helper()
	if d := time.Since(start); d >= gaveUpLimit {
		t.Errorf("%s took %v to give up: not the bounded wait of shortPeerTimeout", what, d)
	}
}

// CmatestCase is a run of ucmatose or udaddy against itself: the flags of
// the server (on B's interface, named with -d) and of the client, and
// what each prints on stdout; both end with status 0, nothing on stderr.
type CmatestCase struct {
	Name           string
	Server, Client []string
	Sout, Cout     string
}

// TestCmatest runs tool's cases, the server in p.B, the client in p.A.
func TestCmatest(t *testing.T, p *netns.Pair, tool base.Command, cases []CmatestCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			rs, rc := CMServerClient(t, p, tool, append([]string{tool.Name, "-d", p.B.Ifname}, tc.Server...),
				tool, append([]string{tool.Name}, tc.Client...), ServerLinger)
			WantRun(t, "client", rc, 0, tc.Cout, "")
			WantRun(t, "server", rs, 0, tc.Sout, "")
		})
	}
}

// StartServer runs cmd with args (from its name) in h until the test
// ends (or stop is called) and waits until it listens.
func StartServer(t *testing.T, h *netns.Host, listened <-chan struct{}, cmd base.Command, args ...string) (res <-chan clitest.Result, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sc := clitest.RunIn(ctx, h, cmd, args...)
	select {
	case <-listened:
	case r := <-sc:
		t.Fatalf("%q ended before listening: %v\nstdout:\n%s\nstderr:\n%s", args, r.Err, r.Stdout, r.Stderr)
	case <-time.After(clitest.Slowdown * 30 * time.Second):
		t.Fatalf("%q never listened", args)
	}
	return sc, cancel
}

// Usage44 is the usage rdma-core 44's name printed (after its message for
// -x, where it has one), captured in testdata/usage-NAME-44.txt from
// Debian's binary run as ./NAME; the clone is NAME.
func Usage44(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/usage-" + name + "-44.txt")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "./"+name, name)
}

// Run runs cmd with args, which start with its name, writing to stdout
// and stderr, and returns its error as cli.Run would: -h's flag.ErrHelp
// is no error. Arguments that do not start with cmd's name are an error.
func Run(ctx context.Context, cmd base.Command, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != cmd.Name {
		return fmt.Errorf("cmtest.Run(%s, %q): the arguments must start with the command's name", cmd.Name, args)
	}
	err := cmd.Run(ctx, &base.Env{Stdout: stdout, Stderr: stderr}, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
