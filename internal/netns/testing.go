package netns

import (
	"errors"
	"os"
	"testing"
)

// NewT creates a Pair for a test and removes it when the test ends. It skips
// the test, saying why, when not running as root or when the kernel or system
// lacks namespaces, veth or iproute2; any other failure fails the test.
func NewT(t testing.TB, cfg Config) *Pair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns: needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create network namespaces and veth pairs")
	}
	p, err := New(cfg)
	if errors.Is(err, ErrPermission) || errors.Is(err, ErrUnsupported) {
		t.Skipf("netns: cannot create a test network here: %v", err)
	}
	if err != nil {
		t.Fatalf("netns.New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("netns: close %s/%s: %v", p.A.Name, p.B.Name, err)
		}
	})
	return p
}
