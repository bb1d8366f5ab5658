//go:build linux

package ucmatose

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/mad"
)

const (
	ucmatoseServerOut = "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n" +
		"data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	ucmatoseClientOut = "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
)

func TestUcmatose(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	b := p.B.IP.String()
	testCmatest(t, p, "ucmatose", []cmtest.CmatestCase{
		{Name: "default", Server: nil, Client: []string{"-s", b}, Sout: ucmatoseServerOut, Cout: ucmatoseClientOut},
		{Name: "many", Server: []string{"-c", "4", "-C", "50", "-S", "3000", "-p", "7500", "-b", b},
			Client: []string{"-s", b, "-c", "4", "-C50", "-S3000", "-p", "7500", "-b", p.A.IP.String(), "-t", "0x20"},
			Sout:   ucmatoseServerOut, Cout: ucmatoseClientOut},
		{Name: "ib-port-space", Server: []string{"-P", "ib", "-f", "ip", "-m"}, Client: []string{"-P", "ib", "-f", "ip", "-s", b, "-m"},
			Sout: strings.Replace(ucmatoseServerOut, "cmatose: disconnecting", "migrating to new event channel\ncmatose: disconnecting", 1),
			Cout: strings.Replace(ucmatoseClientOut, "test complete", "migrating to new event channel\ntest complete", 1)},
		{Name: "no-data", Server: []string{"-S", "0"}, Client: []string{"-s", b, "-S", "0"},
			Sout: "cmatose: starting server\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
			Cout: "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n"},
	})
}

// The server's DREQs may come in any order: a server that disconnects
// the connection it accepted last first, and waits for its DREP before
// the next DREQ, gets every DREP from xroce ucmatose's client, as from
// cmatose, which answers each DISCONNECTED as it comes.
func TestUcmatoseClientDisconnectOrder(t *testing.T) {
	p := netns.NewT(t, netns.Config{})
	const conns = 3
	d := cmtest.OpenCMIn(t, p.B)
	l, err := d.Agent.Listen(netip.AddrPortFrom(netip.Addr{}, 7471), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Slowdown*60*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		var accepted []*cm.Conn
		defer func() {
			for _, c := range accepted {
				c.Close()
			}
		}()
		for range conns {
			req, err := l.Accept(ctx)
			if err != nil {
				served <- err
				return
			}
			_, qp, err := cmtest.NewRCQP(d)
			if err == nil {
				err = cm.PrepareQP(qp)
			}
			var c *cm.Conn
			if err == nil {
				c, err = req.Accept(ctx, qp, nil)
			}
			if err != nil {
				served <- err
				return
			}
			accepted = append(accepted, c)
		}
		for i := len(accepted) - 1; i >= 0; i-- {
			if err := accepted[i].Disconnect(ctx); err != nil {
				served <- fmt.Errorf("connection %d accepted: %w", i, err)
				return
			}
		}
		served <- nil
	}()
	rc := <-runIn(ctx, p.A, "ucmatose", "-s", p.B.IP.String(), "-c", fmt.Sprint(conns), "-S", "0")
	cmtest.WantRun(t, "client", rc, 0, "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n", "")
	if err := <-served; err != nil {
		t.Errorf("server: %v", err)
	}
	if i, _ := cm.AttrIndex(mad.AttrDREP); d.Agent.Stats().Rx[i].Load() != conns {
		t.Errorf("server got %d DREPs, want %d", d.Agent.Stats().Rx[i].Load(), conns)
	}
}

func TestUcmatoseFlags(t *testing.T) {
	wantUsage := cmtest.Usage44(t, "ucmatose")
	for _, tc := range []struct {
		args []string
		want string // stderr then stdout
	}{
		{[]string{"-x"}, wantUsage},
		{[]string{"-s"}, strings.Replace(wantUsage, "invalid option -- 'x'", "option requires an argument -- 's'", 1)},
		{[]string{"-c", "2", "-h"}, strings.Replace(wantUsage, "'x'", "'h'", 1)},
	} {
		var out, errb bytes.Buffer
		err := runCmd(context.Background(), append([]string{"ucmatose"}, tc.args...), &out, &errb)
		if base.ExitCode(err) != 1 || !base.Reported(err) || errb.String()+out.String() != tc.want {
			t.Errorf("ucmatose %q: exit %d\n%s%s\nwant exit 1 and\n%s", tc.args, base.ExitCode(err), errb.String(), out.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	o, _, done := parseUcmatose(&out, &errb, []string{"-s", "198.18.0.2", "-b", "198.18.0.1", "-f", "IPv6", "-P", "IB", "-c", "3",
		"-C", "20", "-S", "50", "-t", "0x40", "-p", "8000", "-m", "-a", "18", "-d", "veth0"})
	if done {
		t.Fatal(errb.String())
	}
	if o.Dst != "198.18.0.2" || o.Src != "198.18.0.1" || !o.Numeric || o.ps != 0x13f || o.Connections != 3 || o.Count != 20 ||
		o.Size != 50 || o.TOS != 0x40 || !o.SetTOS || o.port != "8000" || !o.migrate || o.Ifname != "veth0" {
		t.Errorf("options %+v", *o)
	}
	o, _, _ = parseUcmatose(&out, &errb, []string{"-f", "dns", "-P", "udp"})
	if errb.String() != "Warning: unknown address format\nWarning: unknown port space format\n" ||
		o.Dst != "" || o.ps != 0x106 || o.Connections != 1 || o.Count != 10 || o.Size != 100 || o.port != "7471" || o.Numeric {
		t.Errorf("warnings %q, defaults %+v", errb.String(), *o)
	}
}
