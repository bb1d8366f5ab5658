//go:build !linux

package xdp

import "fmt"

// Device is unavailable outside Linux.
type Device struct{}

// Open reports ErrNotSupported: AF_XDP exists only on Linux.
func Open(ifname string, cfg Config) (*Device, error) {
	return nil, fmt.Errorf("xdp: open %s: %w", ifname, ErrNotSupported)
}

// Close does nothing.
func (d *Device) Close() error { return nil }

// Available reports ErrNotSupported: AF_XDP exists only on Linux.
func Available() error { return fmt.Errorf("xdp: %w", ErrNotSupported) }
