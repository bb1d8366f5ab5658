package roce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xroce/xroce/link"
)

// fakeResolver answers from a table, or waits for its context when the
// destination is not in it; it records the calls and whether it was closed.
type fakeResolver struct {
	hops   map[netip.Addr]NextHop
	asked  []netip.Addr
	closed bool
}

func (r *fakeResolver) Resolve(ctx context.Context, dst netip.Addr) (NextHop, error) {
	r.asked = append(r.asked, dst)
	if h, ok := r.hops[dst]; ok {
		return h, nil
	}
	<-ctx.Done()
	return NextHop{}, fmt.Errorf("no answer: %w: %w", ErrUnreachable, ctx.Err())
}

func (r *fakeResolver) Close() error { r.closed = true; return nil }

// Device.Resolve asks Config.Neighbors first, then the Resolver with a
// context bounded by ResolveTimeout, and takes the route's source address
// when the Resolver gives one. It runs in a synctest bubble, on fake time.
func TestResolveConsultsResolver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ipC, ipD, ipE := netip.MustParseAddr("198.18.1.3"), netip.MustParseAddr("198.18.1.4"), netip.MustParseAddr("198.18.1.5")
		ll := netip.MustParseAddr("fe80::1")
		r := &fakeResolver{hops: map[netip.Addr]NextHop{
			ipC: {MAC: [6]byte{2, 0, 0, 0, 0, 0x0c}},
			ipD: {MAC: [6]byte{2, 0, 0, 0, 0, 0x0d}, Src: netip.MustParseAddr("::ffff:198.18.0.9")},
			ll:  {MAC: [6]byte{2, 0, 0, 0, 0, 0x11}},
		}}
		a, b := link.NewPipe(link.PipeConfig{MACA: macA, MACB: macB})
		defer b.Close()
		d, err := NewDevice([]link.Link{a}, Config{
			Addrs:          []netip.Addr{ipA},
			Neighbors:      map[netip.Addr]net.HardwareAddr{ipB: macB},
			Resolver:       r,
			ResolveTimeout: 20 * time.Millisecond,
			Closer:         closerFunc(func() error { return errors.Join(a.Close(), r.Close()) }),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, c := range []struct {
			dst     netip.Addr
			mac     net.HardwareAddr
			src     netip.Addr
			resolve bool // asks the Resolver
		}{
			{ipB, macB, ipA, false},
			{netip.AddrFrom16(ipB.As16()), macB, ipA, false}, // IPv4-mapped
			{ipC, net.HardwareAddr{2, 0, 0, 0, 0, 0x0c}, ipA, true},
			{ipD, net.HardwareAddr{2, 0, 0, 0, 0, 0x0d}, netip.MustParseAddr("198.18.0.9"), true},
			{ll, net.HardwareAddr{2, 0, 0, 0, 0, 0x11}, d.GIDs()[0], true}, // link-local: from GID 0
		} {
			r.asked = nil
			av, err := d.Resolve(ctx, c.dst)
			if err != nil {
				t.Fatalf("Resolve(%v): %v", c.dst, err)
			}
			if net.HardwareAddr(av.DstMAC[:]).String() != c.mac.String() || av.SrcIP != c.src || av.DstIP != c.dst.Unmap() ||
				net.HardwareAddr(av.SrcMAC[:]).String() != macA.String() {
				t.Errorf("Resolve(%v) = %+v, want MAC %v from %v", c.dst, av, c.mac, c.src)
			}
			if asked := len(r.asked) > 0; asked != c.resolve {
				t.Errorf("Resolve(%v) asked the resolver: %v, want %v", c.dst, asked, c.resolve)
			}
		}
		start := time.Now()
		_, err = d.Resolve(ctx, ipE)
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Resolve(%v) = %v, want ErrUnreachable after the timeout", ipE, err)
		}
		if el := time.Since(start); el != 20*time.Millisecond {
			t.Errorf("Resolve gave up after %v, want ResolveTimeout (20ms)", el)
		}
		_, err = d.Resolve(ctx, netip.MustParseAddr("2001:db8::1")) // no address of that family
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("Resolve without an IPv6 source: %v, want ErrUnreachable", err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if !r.closed {
			t.Error("Close did not close Config.Closer")
		}
	})
}

// Without a Resolver, Resolve knows the Neighbors only.
func TestResolveWithoutResolver(t *testing.T) {
	da, _ := pipeDevices(t, 1, noFaults, Config{})
	_, err := da.Resolve(context.Background(), netip.MustParseAddr("198.18.0.3"))
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Resolve of a stranger: %v, want ErrUnreachable", err)
	}
}

// closerFunc is an io.Closer made of a function.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// NewDevice that fails closes Config.Closer in place of the links.
func TestNewDeviceFailsClosesCloser(t *testing.T) {
	a, b := link.NewPipe(link.PipeConfig{})
	defer b.Close()
	closed := false
	_, err := NewDevice([]link.Link{a}, Config{Addrs: []netip.Addr{ipA}, Batch: -1,
		Closer: closerFunc(func() error { closed = true; return a.Close() })})
	if !errors.Is(err, ErrInvalid) || !closed {
		t.Fatalf("NewDevice with batch -1: %v, Closer closed %v; want ErrInvalid, closed", err, closed)
	}
}
