// Command rshttp is a Go net/http server whose listener is package
// stream's over RDMA CM, which takes rsocket connections: interop/run uses
// it to show an unmodified TCP program in the guest (bash's /dev/tcp under
// LD_PRELOAD=librspreload.so) reaching net/http through rsockets. It serves
// GET /hello (one line), GET /lines?n=N (N lines "xroce line 000001" …)
// and GET /bytes?n=N (N bytes, byte i being i mod 251), logs each request, and exits 0 once it has answered -requests
// requests, 1 when -timeout passes first.
//
//	rshttp -d tap0 -listen 198.18.1.1:8080 -requests 2
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/xroce/xroce/cm"
	"github.com/xroce/xroce/nic"
	"github.com/xroce/xroce/roce"
	"github.com/xroce/xroce/stream"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rshttp:", err)
		os.Exit(1)
	}
}

// loggingListener logs how each connection's CloseWrite and Close end,
// with its counters: net/http drops those errors, and a row that fails
// needs them.
type loggingListener struct{ *stream.Listener }

func (l loggingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return loggingConn{c.(*stream.Conn)}, nil
}

type loggingConn struct{ *stream.Conn }

func (c loggingConn) CloseWrite() error {
	err := c.Conn.CloseWrite()
	fmt.Printf("%v: CloseWrite: %v\n", c.Conn, err)
	return err
}

func (c loggingConn) Close() error {
	err := c.Conn.Close()
	fmt.Printf("%v: Close: %v; %+v\n", c.Conn, err, c.Conn.Stats())
	return err
}

func run(args []string) error {
	fs := flag.NewFlagSet("rshttp", flag.ContinueOnError)
	ifname := fs.String("d", "", "the RoCE `interface`")
	listen := fs.String("listen", "", "`address:port` to listen on (RDMA CM, TCP port space)")
	requests := fs.Int("requests", 1, "exit after answering this many requests")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr, err := netip.ParseAddrPort(*listen)
	if err != nil || *ifname == "" || *requests < 1 {
		return fmt.Errorf("want -d INTERFACE -listen ADDRESS:PORT and -requests ≥ 1")
	}
	dev, err := nic.Open(*ifname, nic.Config{})
	if err != nil {
		return err
	}
	if err := dev.Fallback(); err != nil {
		fmt.Fprintf(os.Stderr, "rshttp: %s: AF_XDP not available (%v); using AF_PACKET\n", *ifname, err)
	}
	defer dev.Close()
	agent, err := cm.Open(dev.Device, cm.AgentConfig{})
	if err != nil {
		return err
	}
	defer agent.Close()
	// rsocket's retry count 7 (for ever), and a minute for the last sends
	// at close: the emulated guest may stall (a row of trixie's cmloss
	// lost its answer when Close gave up after the default 5 s).
	ln, err := stream.Config{Connect: roce.ConnectOptions{RetryCnt: 7}, Linger: time.Minute}.ListenCM(agent, addr)
	if err != nil {
		return err
	}
	var served atomic.Int64
	done := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from net/http over rsocket, %s\n", r.RemoteAddr)
	})
	mux.HandleFunc("GET /lines", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > 1<<20 {
			http.Error(w, "want n=0..1Mi", http.StatusBadRequest)
			return
		}
		for i := 1; i <= n; i++ {
			fmt.Fprintf(w, "xroce line %06d\n", i)
		}
	})
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > 64<<20 {
			http.Error(w, "want n=0..64Mi", http.StatusBadRequest)
			return
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i % 251)
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(b)
	})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("%s %s %s from %s\n", r.Method, r.URL, r.Proto, r.RemoteAddr)
		mux.ServeHTTP(w, r)
		if served.Add(1) == int64(*requests) {
			close(done)
		}
	})}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(loggingListener{ln}) }()
	fmt.Printf("rshttp: listening on %v (%s)\n", addr, *ifname)
	select {
	case <-done:
	case err := <-errc:
		return err
	case <-time.After(*timeout):
		srv.Close()
		return fmt.Errorf("%d of %d requests in %v", served.Load(), *requests, *timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	fmt.Printf("rshttp: %d requests answered\n", served.Load())
	return nil
}
