package base

import (
	"testing"
	"time"
)

func TestFormats(t *testing.T) {
	for n, want := range map[int]string{64: "64 B", 4096: "4 KiB", 1 << 20: "1 MiB", 3 << 19: "1.5 MiB", 1000: "1000 B"} {
		if got := ByteSize(n); got != want {
			t.Errorf("ByteSize(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int]string{0: "0 queues", 1: "1 queue", 2: "2 queues"} {
		if got := Plural(n, "queue"); got != want {
			t.Errorf("Plural(%d) = %q, want %q", n, got, want)
		}
	}
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[float64]time.Duration{0: 1, 50: 5, 99: 9, 100: 10} {
		if got := Percentile(ds, p); got != want {
			t.Errorf("Percentile(1..10, %v) = %v, want %v", p, got, want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
}
