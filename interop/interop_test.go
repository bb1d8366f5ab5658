package interop

import (
	"os"
	"os/exec"
	"testing"
)

// TestInterop runs interop/run (modes XROCE_INTEROP_MODE, default "default") when
// XROCE_INTEROP=1. A cold run builds the guest image first: give it
// -timeout 30m.
func TestInterop(t *testing.T) {
	if os.Getenv("XROCE_INTEROP") != "1" {
		t.Skip("set XROCE_INTEROP=1 to boot the rxe VM (root; 7-15 min cached, add 1.5 min cold)")
	}
	if os.Geteuid() != 0 {
		t.Skip("interop/run needs root: network namespaces, a tap, debootstrap")
	}
	mode := os.Getenv("XROCE_INTEROP_MODE")
	if mode == "" {
		mode = "default"
	}
	cmd := exec.Command("./run", mode)
	cmd.Stdout = t.Output()
	cmd.Stderr = t.Output()
	if err := cmd.Run(); err != nil {
		t.Fatalf("interop/run %s: %v", mode, err)
	}
}
