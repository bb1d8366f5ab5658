package lab

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/capture"
	"github.com/xroce/xroce/cmd/xroce/internal/clitest"
	"github.com/xroce/xroce/internal/netns"
	"github.com/xroce/xroce/internal/statsock"
)

// needRoot skips a test that needs namespaces and XDP.
func needRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("the lab takes seconds: not with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root (network namespaces, XDP)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the lab needs iproute2's ip")
	}
}

// labOutput is a bytes.Buffer safe for one writer and concurrent readers,
// that calls onWrite with everything written so far.
type labOutput struct {
	mu      sync.Mutex
	b       bytes.Buffer
	onWrite func(string)
}

func (s *labOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.b.Write(p)
	all := s.b.String()
	s.mu.Unlock()
	if s.onWrite != nil {
		s.onWrite(all)
	}
	return n, err
}

func (s *labOutput) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var nsRE = regexp.MustCompile(`namespaces\s+(\S+) \(A\) and (\S+) \(B\)`)

// checkNoNamespaces checks that the namespaces the lab's output names are gone.
func checkNoNamespaces(t *testing.T, out string) {
	t.Helper()
	m := nsRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no namespace names in the output:\n%s", out)
	}
	for _, name := range m[1:] {
		if netns.Exists(name) {
			t.Errorf("namespace %s left behind", name)
		}
	}
}

// labGaps matches a queue pair's line of the capture's summary, with its gaps.
var labGaps = regexp.MustCompile(`(?m)^  (.*QP 0x[0-9a-f]+ .*?) (\d+) gaps \(\d+ PSNs missing\).*$`)

// checkPcap decodes the capture as xroce dump -q does (its summary, by
// capture's Dumper): every frame RoCE, every ICRC good, no PSN missing from
// any queue pair's flow.
func checkPcap(t *testing.T, path string) clitest.Summary {
	t.Helper()
	var b bytes.Buffer
	d := capture.NewDumper(&b, capture.Options{Quiet: true})
	if err := d.File(path); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b.String())
	}
	d.Summary()
	out := b.String()
	s := clitest.ParseSummary(t, out)
	if s.RoCE == 0 || s.Bad != 0 || s.Malformed != 0 || s.OK != s.RoCE || s.Other != 0 {
		t.Errorf("pcap summary %+v: want only RoCE frames, all with a good ICRC", s)
	}
	// The lab records what each side sends, so no flow may miss a PSN:
	// a gap would be the recording pausing inside a flow (measure).
	flows := labGaps.FindAllStringSubmatch(out, -1)
	if len(flows) == 0 {
		t.Errorf("pcap summary has no queue pairs:\n%s", out)
	}
	for _, m := range flows {
		if m[2] != "0" {
			t.Errorf("pcap summary: %s", m[0])
		}
	}
	return s
}

// The whole lab with short measurements; its stat socket serves the
// devices' counters while it runs (what xroce stat reads; stat's tests
// check its printing of them).
func TestLabRun(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	statDir := filepath.Join(dir, "run")
	pcap := filepath.Join(dir, "lab.pcap")
	statOut := make(chan *statsock.Snapshot, 1)
	labDone := make(chan struct{})
	go func() { // a stat client against the running lab
		// Look until both devices have sent something (the first
		// snapshot may come between A's first frame and B's answer),
		// or the lab has ended, and hand over the last snapshot read.
		var last *statsock.Snapshot
		for {
			select {
			case <-labDone:
				statOut <- last
				return
			default:
			}
			if ps, _ := statsock.List(statDir); len(ps) > 0 {
				s, err := statsock.Read(context.Background(), ps[0].Path)
				if err == nil && len(s.Devices) > 0 {
					last = s
					if labBothSent(s) {
						break
					}
				} else if last != nil {
					break // the lab has ended
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		statOut <- last
	}()
	var stdout, stderr labOutput
	err := Cmd.Run(context.Background(), &base.Env{Stdout: &stdout, Stderr: &stderr}, []string{"--duration", "300ms", "--trace", "20", "--pcap", pcap,
		"--stat-dir", statDir, "--sizes", "64,3000"})
	close(labDone)
	out := stdout.String()
	t.Logf("output:\n%s", out)
	if err != nil {
		t.Fatalf("lab: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{
		"host A      198.18.0.1", "AF_XDP copy mode",
		"  ok   RC SEND 64 B", "  ok   RC SEND_WITH_IMM 3000 B", "  ok   RC WRITE_WITH_IMM 64 B", "  ok   RC READ 3000 B",
		"  ok   RC FETCH_ADD +2", "A got the old value 40, B's word is now 42", "  ok   RC CMP_SWAP 42->9",
		"  ok   UC WRITE 3000 B", "  ok   UD SEND 64 B",
		"  ok   RC connect (RDMA CM)", "|- CM REQ TCP:7471 QPN ", "CM REP QPN ", "|- CM RTU ---", "|- RC SEND_ONLY PSN ", "RC ACKNOWLEDGE PSN ", "(the trace ends here: --trace 20)",
		"  ok   RC FETCH_ADD 32 x +1", "PSN sequence NAKs sent", "go-back-N retransmissions",
		"  ok   xroce RC WRITE bandwidth", "  ok   TCP latency",
		"19 operations checked, all byte-exact", "loss 10% (RC)", "bandwidth, 64 KiB messages/writes", "Gbit/s",
		"latency, half round trip, median", "TCP (kernel, Go net.Conn)",
		"; blocking waits (CQ.Wait), no busy poll", "; Go net.Conn in this process, same veth",
		"latency: ping-pongs between A and B over the same veth, both ends in this process; xroce waits",
		"in CQ.Wait (asleep in poll(2) on the AF_XDP socket, no busy poll), TCP in Go's netpoller",
		" rc-lat 0x15<->0x15",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("a check failed")
	}
	if n := strings.Count(out, "  |- ") + strings.Count(out, "  |<-"); n < 20 {
		t.Errorf("%d diagram lines, want at least the 20 traced", n)
	}
	checkNoNamespaces(t, out)
	s := checkPcap(t, pcap)
	t.Logf("pcap: %+v", s)

	so := <-statOut
	if so == nil {
		t.Fatal("the stat socket never served the lab's counters")
	}
	for _, d := range so.Devices {
		n, _ := statsock.Lookup(d.Counters, "tx_frames")
		t.Logf("stat socket, phase %s: %s %s sent %d frames", so.Phase, d.Name, d.Addr, n)
	}
	if !labBothSent(so) {
		t.Errorf("the stat socket shows no frames sent by A and B")
	}
	if ps, _ := statsock.List(statDir); len(ps) != 0 {
		t.Errorf("stat socket left behind: %+v", ps)
	}
}

// labBothSent reports whether a snapshot of the lab has devices A and B,
// each with frames sent.
func labBothSent(s *statsock.Snapshot) bool {
	sent := map[string]bool{}
	for _, d := range s.Devices {
		n, _ := statsock.Lookup(d.Counters, "tx_frames")
		sent[d.Name] = n > 0
	}
	return sent["A"] && sent["B"]
}

// labStopLimit bounds how long the lab may take to stop once interrupted:
// generous against a busy machine tearing down its namespaces, short
// against the minute each measurement of --duration 1m would run if the
// interrupt did not stop it.
const labStopLimit = 30 * time.Second

// Cancelling the context (Ctrl-C) in each phase removes the namespaces.
func TestLabInterrupt(t *testing.T) {
	needRoot(t)
	for _, at := range []string{"tour:", "loss:", "measure:"} {
		t.Run(strings.TrimSuffix(at, ":"), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var once sync.Once
			at0 := make(chan time.Time, 1) // when it was interrupted
			stdout := &labOutput{onWrite: func(all string) {
				if strings.Contains(all, at) {
					once.Do(func() {
						at0 <- time.Now()
						cancel()
					})
				}
			}}
			err := Cmd.Run(ctx, &base.Env{Stdout: stdout, Stderr: &labOutput{}}, []string{"--duration", "1m", "--pcap", "", "--stat-dir", ""})
			var cancelled time.Time
			select {
			case cancelled = <-at0:
			default:
				t.Fatalf("lab = %v and never printed %q:\n%s", err, at, stdout.String())
			}
			if err == nil || !strings.Contains(err.Error(), "interrupted") {
				t.Errorf("lab = %v, want interrupted", err)
			}
			if base.ExitCode(err) != 1 {
				t.Errorf("exit %d, want 1", base.ExitCode(err))
			}
			if el := time.Since(cancelled); el > labStopLimit {
				t.Errorf("took %v to stop after the interrupt: it ran on", el)
			}
			checkNoNamespaces(t, stdout.String())
		})
	}
}

// The real binary: exit 0 and a good pcap; SIGINT mid-run removes the
// namespaces and exits 1.
func TestLabBinary(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "xroce")
	build := exec.Command("go", "build", "-o", bin, "github.com/xroce/xroce/cmd/xroce")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pcap := filepath.Join(dir, "lab.pcap")
	cmd := exec.Command(bin, "lab", "--duration", "200ms", "--loss", "5%", "--pcap", pcap, "--stat-dir", "", "--quiet")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xroce lab: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "operations checked, all byte-exact") || !strings.Contains(string(out), "TCP (kernel, Go net.Conn)") {
		t.Errorf("no results table in:\n%s", out)
	}
	if strings.Contains(string(out), "tour: each operation") {
		t.Errorf("--quiet printed the tour:\n%s", out)
	}
	checkPcap(t, pcap)
	dump := exec.Command(bin, "dump", "-q", pcap)
	if dout, err := dump.CombinedOutput(); err != nil {
		t.Errorf("xroce dump: %v\n%s", err, dout)
	}

	// Ctrl-C during the measurements.
	var stdout labOutput
	sig := make(chan struct{})
	var once sync.Once
	stdout.onWrite = func(all string) {
		if strings.Contains(all, "measure:") {
			once.Do(func() { close(sig) })
		}
	}
	cmd = exec.Command(bin, "lab", "--duration", "1m", "--pcap", "", "--stat-dir", "")
	cmd.Stdout = &stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-sig:
	case err := <-exited:
		t.Fatalf("xroce lab ended (%v) before its measure phase:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("no measure phase:\n%s", stdout.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err = <-exited:
	case <-time.After(labStopLimit):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("still running %v after SIGINT: it ran on", labStopLimit)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("after SIGINT: %v, want exit status 1", err)
	}
	checkNoNamespaces(t, stdout.String())
}

// A 9000-byte MTU: RoCE MTU 4096 over multi-buffer XDP, two queues and
// workers per device; tour and loss only.
func TestLabJumbo(t *testing.T) {
	needRoot(t)
	pcap := filepath.Join(t.TempDir(), "jumbo.pcap")
	out, errOut, err := run(t, "lab", "--duration", "0", "--mtu", "9000", "--queues", "2", "--sizes", "64,10000", "--trace", "0",
		"--loss", "5%", "--pcap", pcap, "--stat-dir", "")
	if err != nil {
		t.Fatalf("lab: %v\n%s\n%s", err, out, errOut)
	}
	for _, want := range []string{"RoCE MTU 4096", "2 workers", "  ok   RC READ 10000 B", "19 operations checked, all byte-exact", "loss 5% (RC)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "  |- ") {
		t.Errorf("--trace 0 drew packets")
	}
	checkNoNamespaces(t, out)
	checkPcap(t, pcap)
}

// An error or a panic in the middle of the lab still removes the namespaces.
func TestLabFailure(t *testing.T) {
	needRoot(t)
	defer func() { labTestHook = nil }()
	for _, c := range []struct{ phase, how string }{{"tour", "error"}, {"loss", "panic"}, {"measure", "panic"}} {
		t.Run(c.phase+"-"+c.how, func(t *testing.T) {
			boom := errors.New("injected failure")
			labTestHook = func(phase string) error {
				if phase != c.phase {
					return nil
				}
				if c.how == "panic" {
					panic(boom)
				}
				return boom
			}
			var stdout labOutput
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						if p != boom {
							panic(p)
						}
						err = boom
					}
				}()
				err = Cmd.Run(context.Background(), &base.Env{Stdout: &stdout, Stderr: &labOutput{}}, []string{"--duration", "100ms", "--pcap", "", "--stat-dir", ""})
			}()
			if !errors.Is(err, boom) {
				t.Errorf("lab = %v, want the injected failure", err)
			}
			checkNoNamespaces(t, stdout.String())
		})
	}
}
