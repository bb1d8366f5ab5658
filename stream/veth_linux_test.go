package stream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/nic"
)

// vethEnv is a veth pair between two new namespaces with a device on each
// end and a stream Listener in B.
type vethEnv struct {
	p      *netns.Pair
	da, db *nic.Device
	ln     *Listener
	addr   string // the listener's side channel, in B
}

func newVeth(t testing.TB, cfg Config) *vethEnv {
	t.Helper()
	e := &vethEnv{p: netns.NewT(t, netns.Config{MTU: 1500})}
	for i, h := range []*netns.Host{e.p.A, e.p.B} {
		var d *nic.Device
		err := h.Do(func() error {
			var err error
			d, err = nic.Open(h.Ifname, nic.Config{Datapath: nic.DatapathXDP})
			if err != nil || i == 0 {
				return err
			}
			e.ln, err = cfg.Listen(d.Device, net.JoinHostPort(h.IP.String(), "0"))
			return err
		})
		if err != nil {
			t.Fatalf("open %s: %v", h.Ifname, err)
		}
		t.Cleanup(func() { d.Close() })
		if i == 0 {
			e.da = d
		} else {
			e.db = d
		}
	}
	t.Cleanup(func() { e.ln.Close() })
	e.addr = e.ln.Addr().String()
	return e
}

// dial connects from A; the side channel's socket is made in A's namespace.
func (e *vethEnv) dial(ctx context.Context, cfg Config) (*Conn, error) {
	var c *Conn
	err := e.p.A.Do(func() error {
		var err error
		c, err = cfg.Dial(ctx, e.da.Device, e.addr)
		return err
	})
	return c, err
}

func (e *vethEnv) pair(t testing.TB, cfg Config) (*Conn, *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang, not a slow machine
	defer cancel()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := e.ln.Accept()
		ch <- res{c, err}
	}()
	a, err := e.dial(ctx, cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatalf("accept: %v", r.err)
	}
	b := r.c.(*Conn)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestVethDialListen(t *testing.T) {
	e := newVeth(t, Config{})
	a, b := e.pair(t, Config{})
	if a.RemoteAddr().String() != e.addr || a.RemoteAddr().Network() != "xroce" {
		t.Errorf("RemoteAddr %v (%s), want %s", a.RemoteAddr(), a.RemoteAddr().Network(), e.addr)
	}
	if b.LocalAddr().String() != e.addr {
		t.Errorf("LocalAddr %v, want %s", b.LocalAddr(), e.addr)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		transfer(t, a, b, 16<<20, 200<<10, 100<<10, 11)
	}()
	transfer(t, b, a, 4<<20, 3000, 5000, 12)
	wg.Wait()
	t.Logf("a %+v", a.Stats())
}

// A Dial to a port with no listener fails, and the listener's Close ends
// Accept with net.ErrClosed.
func TestVethRefused(t *testing.T) {
	e := newVeth(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	e.p.A.Do(func() error {
		_, err = Dial(ctx, e.da.Device, net.JoinHostPort(e.p.B.IP.String(), "1"))
		return nil
	})
	if err == nil {
		t.Errorf("dial to a closed port succeeded")
	}
	e.ln.Close()
	if _, err := e.ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

// An unmodified net/http server and client over streams. XROCE_STREAM_HTTP
// sets the body size in MiB (default 16; 1024 for the 1 GiB).
func TestVethHTTP(t *testing.T) {
	size := 16 << 20
	if v := os.Getenv("XROCE_STREAM_HTTP"); v != "" {
		mib, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		size = mib << 20
	}
	e := newVeth(t, Config{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			w.Header().Set("Content-Length", strconv.Itoa(size))
			buf := make([]byte, 256<<10)
			for i := range buf {
				buf[i] = byte(i * 13)
			}
			for left := size; left > 0; left -= len(buf) {
				if _, err := w.Write(buf[:min(left, len(buf))]); err != nil {
					return
				}
			}
		case http.MethodPost:
			h := sha256.New()
			n, _ := io.Copy(h, r.Body)
			fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
		}
	})}
	go srv.Serve(e.ln)
	t.Cleanup(func() { srv.Close() })
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return e.dial(ctx, Config{})
	}}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	start := time.Now()
	resp, err := cl.Get("http://" + e.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 256<<10)
	for i := range want {
		want[i] = byte(i * 13)
	}
	buf := make([]byte, 256<<10)
	got := 0
	for {
		n, err := io.ReadFull(resp.Body, buf)
		if !bytes.Equal(buf[:n], want[:n]) {
			t.Fatalf("body differs after %d bytes", got)
		}
		got += n
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	el := time.Since(start)
	if got != size {
		t.Fatalf("GET: %d bytes, want %d", got, size)
	}
	t.Logf("GET %d MiB in %v: %.2f Gbit/s", size>>20, el, float64(size)*8/el.Seconds()/1e9)

	body := bytes.Repeat([]byte("posted "), 300000)
	resp, err = cl.Post("http://"+e.addr+"/", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if w := fmt.Sprintf("%d %x", len(body), sha256.Sum256(body)); string(reply) != w {
		t.Fatalf("POST reply %q, want %q", reply, w)
	}
}

// io.Copy from a file into a stream and from the stream into a file.
func TestVethCopyFile(t *testing.T) {
	e := newVeth(t, Config{})
	a, b := e.pair(t, Config{})
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := make([]byte, 8<<20+12345)
	for i := range data {
		data[i] = byte(i ^ i>>9)
	}
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		f, err := os.Open(src)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		_, err = io.Copy(a, f)
		errc <- errors.Join(err, a.CloseWrite())
	}()
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(dst, b)
	dst.Close()
	if err != nil || n != int64(len(data)) {
		t.Fatalf("io.Copy to file: %d, %v; want %d", n, err, len(data))
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "dst"))
	if !bytes.Equal(got, data) {
		t.Fatalf("file copied over the stream differs")
	}
}

// The direct path over veth: random sizes both ways with large reads,
// checksummed; some bytes must have gone direct.
func TestVethDirect(t *testing.T) {
	cfg := Config{DirectThreshold: 32 << 10}
	e := newVeth(t, cfg)
	a, b := e.pair(t, cfg)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		transfer(t, a, b, 16<<20, 300<<10, 1<<20, 41)
	}()
	transfer(t, b, a, 4<<20, 64<<10, 256<<10, 42)
	wg.Wait()
	sa, sb := a.Stats(), b.Stats()
	t.Logf("a %+v", sa)
	t.Logf("b %+v", sb)
	if sa.DirectBytes+sb.DirectBytes == 0 {
		t.Errorf("nothing went direct")
	}
}

// A side channel that never speaks does not hold up other connections:
// with a handshake timeout of an hour, a listener that set up one side
// channel after another would not get past the silent one, and pair
// would give up (after 30 s, a hang). The silent client is still
// waited for when the other connection is up.
func TestVethSilentClient(t *testing.T) {
	e := newVeth(t, Config{HandshakeTimeout: time.Hour})
	var silent net.Conn
	if err := e.p.A.Do(func() error {
		var err error
		silent, err = net.Dial("tcp", e.addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	a, b := e.pair(t, Config{})
	silent.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if n, err := silent.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the silent client's side channel: read %d bytes, %v; want it still open and waiting", n, err)
	}
	transfer(t, a, b, 1<<20, 64<<10, 64<<10, 51)
}

// TestVethRsocket: rsocket streams over AF_XDP on a veth pair, RDMA CM on
// QP 1 included, both directions at once with 1% of the RoCE frames
// dropped by the XDP programs at both ends, then a half-close.
func TestVethRsocket(t *testing.T) {
	e := newVeth(t, Config{})
	var agents [2]*cm.Agent
	for i, d := range []*nic.Device{e.da, e.db} {
		a, err := cm.Open(d.Device, cm.AgentConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		agents[i] = a
		if err := d.XDPProgram().SetLoss(0.01); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Protocol: ProtocolRsocket, RingSize: 256 << 10, Linger: 2 * time.Second}
	l, err := cfg.ListenCM(agents[1], netip.AddrPortFrom(e.p.B.IP, 7471))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := cfg.DialCM(ctx, agents[0], netip.AddrPortFrom(e.p.B.IP, 7471))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := (<-ch).(*Conn)
	defer b.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		transfer(t, a, b, 8<<20, 64<<10, 100<<10, 11)
	}()
	transfer(t, b, a, 8<<20, 200<<10, 30<<10, 12)
	wg.Wait()
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer's CloseWrite: %d, %v", n, err)
	}
	if _, err := b.Write([]byte("still open")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "still open" {
		t.Fatalf("after CloseWrite: %q, %v", got, err)
	}
	// The loss was real and RC repaired it at both ends.
	for i, d := range []*nic.Device{e.da, e.db} {
		c, err := d.XDPProgram().Counters()
		if err != nil {
			t.Fatal(err)
		}
		if s := d.Stats(); c.InjectedDrops == 0 || s.Retransmits == 0 {
			t.Errorf("device %d: %d frames dropped, %d retransmitted: want both > 0", i, c.InjectedDrops, s.Retransmits)
		}
	}
}
