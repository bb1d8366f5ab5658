package stream

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// Streams and TCP side by side on the same veth, in one run:
//
//	go test -run '^$' -bench Veth -benchtime 2s ./stream/
//
// cpu-s/GB is the process's user+system CPU time (both ends of the
// connection are in this process) per 10^9 bytes; direct-% is the share of
// bytes that went straight into an advertised buffer (xroce has the
// default Config, the direct path off; xroce-direct sets DirectThreshold
// to 256 KiB; the reader reads 1 MiB at a time).

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tcpPair connects TCP over the same veth: listener in B, dial from A.
func (e *vethEnv) tcpPair(b *testing.B) (net.Conn, net.Conn) {
	var ln net.Listener
	if err := e.p.B.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(e.p.B.IP.String(), "0"))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	var c net.Conn
	if err := e.p.A.Do(func() error {
		var err error
		c, err = net.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	s := <-ch
	if s == nil {
		b.Fatal("accept failed")
	}
	b.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// listen replaces e's listener (the old one stays open) by one with cfg:
// the accepting side of a pair has the listener's Config.
func (e *vethEnv) listen(b *testing.B, cfg Config) {
	if err := e.p.B.Do(func() error {
		ln, err := cfg.Listen(e.db.Device, net.JoinHostPort(e.p.B.IP.String(), "0"))
		if err == nil {
			b.Cleanup(func() { ln.Close() })
			e.ln, e.addr = ln, ln.Addr().String()
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
}

func benchPairs(b *testing.B, fn func(b *testing.B, w, r net.Conn)) {
	e := newVeth(b, Config{})
	ca, cb := e.pair(b, Config{})
	// The reader (the accepted side) advertises: it needs the threshold.
	direct := Config{DirectThreshold: 256 << 10}
	e.listen(b, direct)
	da, db := e.pair(b, direct)
	ta, tb := e.tcpPair(b)
	run := func(name string, ca, cb *Conn) {
		b.Run(name, func(b *testing.B) {
			before := ca.Stats()
			fn(b, ca, cb)
			after := ca.Stats()
			b.Logf("writer %+v, reader %+v", after, cb.Stats())
			if d := after.BytesWritten - before.BytesWritten; d > 0 {
				b.ReportMetric(100*float64(after.DirectBytes-before.DirectBytes)/float64(d), "direct-%")
			}
		})
	}
	run("xroce", ca, cb)
	run("xroce-direct", da, db)
	b.Run("tcp", func(b *testing.B) { fn(b, ta, tb) })
}

func BenchmarkVethThroughput(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			benchPairs(b, func(b *testing.B, w, r net.Conn) {
				buf := make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				done := make(chan error, 1)
				go func() {
					// 1 MiB reads, large enough to be advertised.
					rb := make([]byte, 1<<20)
					for left := b.N * size; left > 0; {
						n, err := r.Read(rb[:min(left, len(rb))])
						if err != nil {
							done <- err
							return
						}
						left -= n
					}
					done <- nil
				}()
				cpu := cpuTime()
				b.ResetTimer()
				for range b.N {
					if _, err := w.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				sec := b.Elapsed().Seconds()
				total := float64(b.N) * float64(size)
				b.ReportMetric(total*8/sec/1e9, "Gbit/s")
				b.ReportMetric((cpuTime()-cpu).Seconds()/(total/1e9), "cpu-s/GB")
			})
		})
	}
}

func BenchmarkVethPingPong(b *testing.B) {
	benchPairs(b, func(b *testing.B, w, r net.Conn) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			buf := make([]byte, 64)
			for ctx.Err() == nil {
				if _, err := io.ReadFull(r, buf); err != nil {
					return
				}
				if _, err := r.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 64)
		b.ResetTimer()
		for range b.N {
			if _, err := w.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(w, buf); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/roundtrip")
	})
}
