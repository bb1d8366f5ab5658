package afpacket

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Discard is a UDP socket that claims a port and drops every datagram sent
// to it; see ListenDiscard.
type Discard struct {
	fds []int
}

// ListenDiscard binds UDP sockets on port for every IPv4 and IPv6 address
// of the calling thread's network namespace, each with a socket filter that
// drops every datagram before it is queued. With it the kernel stops
// answering the RoCE datagrams that an AF_PACKET link also receives with
// ICMP port unreachable (the port now has a listener) and spends no memory
// on them. Use port 4791 (RoCE v2). It fails with EADDRINUSE when something
// already listens there, such as the kernel's rxe driver.
func ListenDiscard(port int) (_ *Discard, err error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("afpacket: discard port %d out of range", port)
	}
	d := &Discard{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	prog := unix.SockFprog{Len: uint16(len(dropAllFilter)), Filter: &dropAllFilter[0]}
	open := func(family int, sa unix.Sockaddr) error {
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			return err
		}
		d.fds = append(d.fds, fd)
		if family == unix.AF_INET6 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
				return err
			}
		}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
			return err
		}
		return unix.Bind(fd, sa)
	}
	if err := open(unix.AF_INET, &unix.SockaddrInet4{Port: port}); err != nil {
		return nil, fmt.Errorf("afpacket: discard udp4 port %d: %w", port, err)
	}
	err = open(unix.AF_INET6, &unix.SockaddrInet6{Port: port})
	if errors.Is(err, unix.EAFNOSUPPORT) {
		err = nil // a kernel without IPv6: the IPv4 socket covers it all
	}
	if err != nil {
		return nil, fmt.Errorf("afpacket: discard udp6 port %d: %w", port, err)
	}
	return d, nil
}

// Close releases the port. It is idempotent.
func (d *Discard) Close() error {
	var errs []error
	for _, fd := range d.fds {
		if err := unix.Close(fd); err != nil {
			errs = append(errs, err)
		}
	}
	d.fds = nil
	return errors.Join(errs...)
}
