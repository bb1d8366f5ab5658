//go:build linux

package device

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// Dial connects to host:port (client) or accepts one connection on port
// (server, host empty), both bounded by ctx.
func Dial(ctx context.Context, host string, port int, cmd string) (net.Conn, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if host != "" {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			var ne net.Error
			if ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout() {
				return nil, fmt.Errorf("%s: couldn't connect to %s: no answer within the timeout (is the address right?)", cmd, addr)
			}
			if errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
				return nil, fmt.Errorf("%s: couldn't connect to %s: %w (is the address right?)", cmd, addr, UnwrapOp(err))
			}
			return nil, fmt.Errorf("%s: couldn't connect to %s: %w (is the server running?)", cmd, addr, UnwrapOp(err))
		}
		return c, nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: couldn't listen to port %d: %w", cmd, port, UnwrapOp(err))
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		var ne net.Error
		if ctx.Err() != nil || errors.Is(err, net.ErrClosed) || errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("%s: no client connected to port %d within the timeout", cmd, port)
		}
		return nil, fmt.Errorf("%s: accept() failed: %w", cmd, err)
	}
	return c, nil
}

// UnwrapOp drops the *net.OpError wrapping that repeats the address.
func UnwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var sc interface{ Unwrap() error }
		if errors.As(op.Err, &sc) && sc.Unwrap() != nil {
			return sc.Unwrap()
		}
		return op.Err
	}
	return err
}
