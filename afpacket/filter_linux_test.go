package afpacket

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestFilterShape checks what the kernel's checker (sk_chk_filter) would
// not explain well: every jump of roceFilter lands on an instruction, jumps
// only go forward (classic BPF has no loops), and the program ends in the
// accept and reject returns the comment shows.
func TestFilterShape(t *testing.T) {
	n := len(roceFilter)
	for i, ins := range roceFilter {
		if ins.Code&0x07 != unix.BPF_JMP {
			continue
		}
		for _, off := range []uint8{ins.Jt, ins.Jf} {
			if tgt := i + 1 + int(off); tgt >= n {
				t.Errorf("instruction %d jumps to %d, past the end (%d)", i, tgt, n)
			}
		}
	}
	if roceFilter[n-2] != (unix.SockFilter{Code: bpfRetK, K: acceptAll}) ||
		roceFilter[n-1] != (unix.SockFilter{Code: bpfRetK, K: rejectAll}) {
		t.Errorf("filter does not end in ret #-1, ret #0")
	}
}
