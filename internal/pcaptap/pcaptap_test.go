package pcaptap

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/xroce/xroce/link"
)

// send transmits n frames of size bytes from a, frame i filled with byte i+seed.
func send(t *testing.T, a link.Link, n, size int, seed byte) {
	t.Helper()
	bufs := make([][]byte, n)
	if got := a.Alloc(bufs); got != n {
		t.Fatalf("Alloc = %d, want %d", got, n)
	}
	for i := range bufs {
		bufs[i] = bufs[i][:size]
		for j := range bufs[i] {
			bufs[i][j] = byte(i) + seed
		}
	}
	if sent, err := a.Transmit(bufs); sent != n || err != nil {
		t.Fatalf("Transmit = %d, %v", sent, err)
	}
}

// drain receives exactly n frames on b.
func drain(t *testing.T, b link.Link, n int) {
	t.Helper()
	bufs := make([][]byte, 16)
	deadline := time.Now().Add(2 * time.Second)
	for n > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames never arrived", n)
		}
		got, err := b.Receive(bufs, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		b.Release(bufs[:got])
		n -= got
	}
}

type frame struct {
	data []byte
	wire int
}

func readAll(t *testing.T, b []byte) []frame {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		t.Fatalf("link type %v, want Ethernet", r.LinkType())
	}
	var out []frame
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, frame{data, ci.Length})
	}
}

func TestRecord(t *testing.T) {
	var file bytes.Buffer
	var seen []Frame
	r, err := New(&file, Config{Snaplen: 100, OnFrame: func(f Frame) {
		f.Data = append([]byte(nil), f.Data...)
		seen = append(seen, f)
	}})
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := link.NewPipe(link.PipeConfig{Seed: 1})
	a, b := Wrap(pa, r, "A", TX), Wrap(pb, r, "B", Both)
	defer a.Close()
	defer b.Close()

	send(t, a, 2, 60, 0) // off: not recorded
	drain(t, b, 2)
	r.Enable(0)
	send(t, a, 3, 80, 10) // recorded at A's TX and B's RX
	drain(t, b, 3)
	send(t, b, 1, 150, 20) // B's TX, cut to 100 bytes; A records no RX
	drain(t, a, 1)
	r.Enable(2)
	send(t, a, 3, 64, 30) // only the first two (A's TX), then off
	drain(t, b, 3)
	if r.Enabled() {
		t.Errorf("Enabled after the limit was spent")
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}

	got := readAll(t, file.Bytes())
	wantFirst := []byte{10, 11, 12, 10, 11, 12, 20, 30, 31}
	wantLen := []int{80, 80, 80, 80, 80, 80, 150, 64, 64}
	if len(got) != len(wantFirst) {
		t.Fatalf("%d frames in the pcap, want %d", len(got), len(wantFirst))
	}
	for i, f := range got {
		if f.data[0] != wantFirst[i] || f.wire != wantLen[i] || len(f.data) != min(wantLen[i], 100) {
			t.Errorf("frame %d: first byte %d, %d of %d bytes; want %d, %d bytes", i, f.data[0], len(f.data), f.wire, wantFirst[i], wantLen[i])
		}
	}
	s := r.Stats()
	if s.Frames != 9 || s.Cut != 1 || s.Missed != 2+2+1+3 {
		t.Errorf("stats %+v, want 9 frames, 1 cut, 8 missed", s)
	}
	labels := ""
	for _, f := range seen {
		labels += f.Label + f.Dir.String() + " "
	}
	if want := "Atx Atx Atx Brx Brx Brx Btx Atx Atx "; labels != want {
		t.Errorf("OnFrame saw %q, want %q", labels, want)
	}
	if len(seen[6].Data) != 150 {
		t.Errorf("OnFrame got %d bytes of a cut frame, want all 150", len(seen[6].Data))
	}
}

func TestDisable(t *testing.T) {
	var file bytes.Buffer
	r, err := New(&file, Config{})
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := link.NewPipe(link.PipeConfig{Seed: 1})
	a := Wrap(pa, r, "A", TX)
	defer a.Close()
	defer pb.Close()
	r.Enable(0)
	send(t, a, 1, 60, 0)
	r.Disable()
	send(t, a, 1, 60, 0)
	r.Flush()
	if got := readAll(t, file.Bytes()); len(got) != 1 {
		t.Fatalf("%d frames, want 1", len(got))
	}
}

type failWriter struct{ after int }

func (w *failWriter) Write(b []byte) (int, error) {
	if w.after <= 0 {
		return 0, errors.New("disk full")
	}
	w.after--
	return len(b), nil
}

func TestWriteError(t *testing.T) {
	r, err := New(&failWriter{after: 1}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := link.NewPipe(link.PipeConfig{Seed: 1, Buffers: 4096})
	a := Wrap(pa, r, "A", TX)
	defer a.Close()
	defer pb.Close()
	r.Enable(0)
	for range 100 { // 100 × 16 × 1000 bytes: more than the buffer
		send(t, a, 16, 1000, 0)
		drain(t, pb, 16)
	}
	if err := r.Flush(); err == nil {
		t.Fatal("Flush: no error after the writer failed")
	}
	if s := r.Stats(); s.Missed == 0 {
		t.Errorf("stats %+v: frames after the error not counted as missed", s)
	}
}

func TestBadSnaplen(t *testing.T) {
	if _, err := New(io.Discard, Config{Snaplen: 10}); err == nil {
		t.Fatal("snaplen 10 accepted")
	}
}

// Recording does not allocate, on or off.
func TestAllocs(t *testing.T) {
	r, err := New(io.Discard, Config{})
	if err != nil {
		t.Fatal(err)
	}
	bufs := [][]byte{make([]byte, 1000), make([]byte, 60)}
	for _, on := range []bool{false, true} {
		if on {
			r.Enable(0)
		}
		if n := testing.AllocsPerRun(100, func() { r.record("A", TX, bufs) }); n != 0 {
			t.Errorf("record (on %v): %v allocations, want 0", on, n)
		}
	}
}

func BenchmarkRecord(b *testing.B) {
	r, err := New(io.Discard, Config{})
	if err != nil {
		b.Fatal(err)
	}
	r.Enable(0)
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 1100)
	}
	b.ReportAllocs()
	b.SetBytes(64 * 1100)
	for b.Loop() {
		r.record("A", TX, bufs)
	}
	b.ReportMetric(float64(b.N)*64/b.Elapsed().Seconds(), "frames/s")
}

// concurrentEnd is a pipe end that allows transmitting beside Receive, as
// an AF_XDP socket does.
type concurrentEnd struct{ *link.PipeEnd }

func (concurrentEnd) ConcurrentTransmit() bool { return true }

// A wrapped link offers link.ConcurrentTransmitter exactly when the link it
// wraps allows it, so that a device over tapped links sends as it would
// without the tap.
func TestWrapForwardsConcurrentTransmit(t *testing.T) {
	a, b := link.NewPipe(link.PipeConfig{Seed: 1})
	defer a.Close()
	defer b.Close()
	rec, err := New(io.Discard, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		l    link.Link
		want bool
	}{
		{"pipe", a, false},
		{"concurrent", concurrentEnd{b}, true},
	} {
		if got := link.ConcurrentTransmit(c.l); got != c.want {
			t.Fatalf("%s: ConcurrentTransmit(unwrapped) = %v, want %v", c.name, got, c.want)
		}
		w := Wrap(c.l, rec, c.name, Both)
		if got := link.ConcurrentTransmit(w); got != c.want {
			t.Errorf("%s: ConcurrentTransmit(Wrap) = %v, want %v", c.name, got, c.want)
		}
		ww := WrapAll([]link.Link{w}, rec, c.name, TX)[0]
		if got := link.ConcurrentTransmit(ww); got != c.want {
			t.Errorf("%s: ConcurrentTransmit(Wrap(Wrap)) = %v, want %v", c.name, got, c.want)
		}
	}
}
