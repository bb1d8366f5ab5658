package xdp

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{syscall.EAFNOSUPPORT, ErrNotSupported},
		{syscall.EPERM, ErrPermission},
		{syscall.EACCES, ErrPermission},
		{syscall.EBUSY, ErrBusy},
		{fmt.Errorf("wrapped: %w", syscall.EBUSY), ErrBusy},
		{syscall.EINVAL, nil},
		{errors.New("other"), nil},
	}
	for _, tt := range tests {
		got := classify("op", tt.err)
		if !errors.Is(got, tt.err) {
			t.Errorf("classify(%v) = %v, lost the cause", tt.err, got)
		}
		for _, s := range []error{ErrNotSupported, ErrPermission, ErrBusy} {
			if errors.Is(got, s) != (s == tt.want) {
				t.Errorf("classify(%v) = %v: errors.Is(%v) = %v", tt.err, got, s, !(s == tt.want))
			}
		}
	}
}
