// Package extest runs an example's server and client in two network
// namespaces joined by a veth pair, for the examples' tests.
package extest

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/xroce/xroce/internal/netns"
)

// Run runs the example's run function as server in one namespace and as
// client in the other, with args added to both, and returns their output.
func Run(t *testing.T, run func(ctx context.Context, args []string, out io.Writer) error, args ...string) (server, client string) {
	t.Helper()
	p := netns.NewT(t, netns.Config{MTU: 1500, Queues: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var sout, cout bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- p.B.Do(func() error {
			return run(ctx, append([]string{"-dev", p.B.Ifname}, args...), &sout)
		})
	}()
	cerr := p.A.Do(func() error {
		return run(ctx, append([]string{"-dev", p.A.Ifname, "-peer", p.B.IP.String()}, args...), &cout)
	})
	serr := <-errc
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v; server: %v\nclient output:\n%s\nserver output:\n%s", cerr, serr, &cout, &sout)
	}
	t.Logf("server:\n%s", &sout)
	t.Logf("client:\n%s", &cout)
	return sout.String(), cout.String()
}
