package bpf

import (
	"testing"
	"time"
)

// BenchmarkProgram measures the program's own cost per frame in the kernel
// (BPF_PROG_TEST_RUN with repeat, which times the runs in the kernel and
// leaves out the syscall), for a redirected RoCE frame and a passed one, and
// for RoCE frames with loss injected (a mix of drops and redirects).
func BenchmarkProgram(b *testing.B) {
	p := loadT(b, Options{})
	if err := p.SetSocket(0, xskT(b)); err != nil {
		b.Fatalf("SetSocket: %v", err)
	}
	for _, c := range []struct {
		name  string
		frame []byte
		loss  float64
	}{
		{"roce-vlan-ipv6", roceVLAN6(1024), 0},
		{"roce-ipv4", roce4(1024), 0},
		{"roce-ipv4-loss-0.01", roce4(1024), 0.01},
		{"roce-ipv4-loss-0.5", roce4(1024), 0.5},
		{"roce-ipv4-loss-1", roce4(1024), 1},
		{"arp", appendEth(nil, ethARP), 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := p.SetLoss(c.loss); err != nil {
				b.Fatalf("SetLoss: %v", err)
			}
			b.ReportAllocs()
			_, per, err := p.prog.Benchmark(c.frame, b.N, nil)
			if err != nil {
				b.Fatalf("Benchmark: %v", err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "kernel-ns/frame")
			b.ReportMetric(float64(time.Second)/float64(max(per, 1)), "frames/s")
		})
	}
}
