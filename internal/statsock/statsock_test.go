package statsock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

func TestServeAndRead(t *testing.T) {
	dir := t.TempDir()
	var n atomic.Uint64
	s, err := Listen(dir, func() *Snapshot {
		return &Snapshot{PID: os.Getpid(), Command: "test", Devices: []Device{{
			Name: "A", Counters: []Counter{{"rx_frames", n.Add(1)}, {"tx_frames", 7}},
			QPs: []QP{{Name: "rc", QPN: 0x11, Type: "RC", State: "RTS"}},
		}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := Path(dir, os.Getpid()); s.Path() != want {
		t.Fatalf("path %s, want %s", s.Path(), want)
	}
	ps, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].PID != os.Getpid() || ps[0].Path != s.Path() {
		t.Fatalf("List = %+v, want this process", ps)
	}
	for i := uint64(1); i <= 3; i++ {
		snap, err := Read(context.Background(), s.Path())
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := Lookup(snap.Devices[0].Counters, "rx_frames"); !ok || v != i {
			t.Errorf("read %d: rx_frames = %d, %v; want %d", i, v, ok, i)
		}
		if snap.Time.IsZero() || snap.Devices[0].QPs[0].QPN != 0x11 {
			t.Errorf("snapshot %+v", snap)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after Close: %v", err)
	}
	if _, err := Read(context.Background(), s.Path()); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Read after Close: %v, want ErrNoProcess", err)
	}
}

// Sockets of processes that are gone are not listed, and Listen removes them.
func TestStale(t *testing.T) {
	dir := t.TempDir()
	const dead = 1<<22 + 12345 // above pid_max's ceiling: never a live process
	stale := Path(dir, dead)
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600)
	if ps, err := List(dir); err != nil || len(ps) != 0 {
		t.Fatalf("List = %+v, %v; want nothing", ps, err)
	}
	s, err := Listen(dir, func() *Snapshot { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale socket not removed: %v", err)
	}
	if ps, _ := List(filepath.Join(dir, "missing")); len(ps) != 0 {
		t.Errorf("List of a missing dir = %+v", ps)
	}
}
