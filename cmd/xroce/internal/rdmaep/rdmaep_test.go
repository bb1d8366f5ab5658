//go:build linux

package rdmaep

import (
	"bytes"
	"context"
	"testing"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
)

func TestRdmaServerClient(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	for _, tc := range []struct {
		name           string
		server, client []string
	}{
		{"default", nil, []string{"-s", b}},
		{"port", []string{"-p", "7600", "-s", b}, []string{"-p7600", "-s", b, "-d", p.A.Ifname}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, rc := cmServerClient(t, p, append([]string{"rdma_server"}, tc.server...), append([]string{"rdma_client"}, tc.client...), cmtest.ServerLinger)
			cmtest.WantRun(t, "client", rc, 0, "rdma_client: start\nrdma_client: end 0\n", "")
			cmtest.WantRun(t, "server", rs, 0, "rdma_server: start\nrdma_server: end 0\n", "")
		})
	}
}

func TestRdmaServerClientFlags(t *testing.T) {
	for _, name := range []string{"rdma_server", "rdma_client"} {
		want := cmtest.Usage44(t, name)
		var out, errb bytes.Buffer
		err := runCmd(context.Background(), []string{name, "-p", "1", "-x"}, &out, &errb)
		if base.ExitCode(err) != 1 || errb.String()+out.String() != want {
			t.Errorf("%s -x: exit %d\n%s%s\nwant exit 1 and\n%s", name, base.ExitCode(err), errb.String(), out.String(), want)
		}
		o, _, _ := parseRdmaEP(&out, &errb, name, "127.0.0.1", []string{"-s198.18.0.9", "-p", "99", "-d", "eth1"})
		if o.addr != "198.18.0.9" || o.port != "99" || o.ifname != "eth1" {
			t.Errorf("%s: %+v", name, *o)
		}
	}
	// Names that do not resolve, as rdma_getaddrinfo reports them.
	var out, errb bytes.Buffer
	err := runCmd(context.Background(), []string{"rdma_client", "-s", "198.18.0.2", "-p", "no-such-service"}, &out, &errb)
	if base.ExitCode(err) != 248 || out.String() != "rdma_client: start\nrdma_getaddrinfo: Servname not supported for ai_socktype\nrdma_client: end -8\n" {
		t.Errorf("bad port: exit %d\n%s%s", base.ExitCode(err), out.String(), errb.String())
	}
}
