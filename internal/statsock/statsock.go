// Package statsock publishes a running xroce process's counters on a unix
// socket, and reads them back for `xroce stat`.
//
// A process that runs xroce devices (`xroce lab`, and later `xroce perf`)
// calls Listen, which makes the stream socket DIR/<pid>.sock (DefaultDir is
// /run/xroce). Each client that connects gets one Snapshot as a JSON
// document followed by a newline, and the server closes the connection:
// there is no request to send, so `socat - UNIX:/run/xroce/1234.sock`
// works too. List finds the sockets of processes that still run; Read
// fetches one snapshot.
//
// Counters are kept as ordered name/value lists rather than as the
// devices' own structs, so that this package depends on nothing of the
// stack and a newer process can add counters that an older `xroce stat`
// still prints.
package statsock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultDir is where processes put their sockets.
const DefaultDir = "/run/xroce"

// Counter is one named counter.
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// QP is one queue pair's state and counters.
type QP struct {
	Name     string    `json:"name,omitempty"` // what the process calls it, e.g. "rc"
	QPN      uint32    `json:"qpn"`
	Type     string    `json:"type"`  // RC, UC or UD
	State    string    `json:"state"` // RESET, INIT, RTR, RTS, SQD, SQE, ERR
	Peer     string    `json:"peer,omitempty"`
	Counters []Counter `json:"counters"`
}

// Device is one device's identity and counters.
type Device struct {
	Name     string    `json:"name"` // what the process calls it, e.g. "A"
	Ifname   string    `json:"ifname,omitempty"`
	Netns    string    `json:"netns,omitempty"`
	Addr     string    `json:"addr,omitempty"`
	Datapath string    `json:"datapath,omitempty"`
	Counters []Counter `json:"counters"`
	QPs      []QP      `json:"qps,omitempty"`
}

// Snapshot is what a process publishes.
type Snapshot struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`         // e.g. "lab"
	Phase   string    `json:"phase,omitempty"` // what the process is doing now
	Started time.Time `json:"started"`
	Time    time.Time `json:"time"` // when the snapshot was taken
	Devices []Device  `json:"devices"`
}

// Server serves snapshots on a unix socket.
type Server struct {
	path string
	ln   *net.UnixListener
	snap func() *Snapshot
	done chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Path returns the socket's path for the process pid in dir.
func Path(dir string, pid int) string {
	return filepath.Join(dir, strconv.Itoa(pid)+".sock")
}

// Listen makes the socket Path(dir, os.Getpid()), creating dir if needed,
// and serves the snapshots snap returns until Close. snap is called once
// per client, from the server's goroutine; it must be safe to call while
// the process works. A socket file left by a process that no longer runs
// is removed first.
func Listen(dir string, snap func() *Snapshot) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("statsock: %w", err)
	}
	removeStale(dir)
	path := Path(dir, os.Getpid())
	os.Remove(path) // ours from an earlier Listen, or a stale one of a reused pid
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("statsock: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	s := &Server{path: path, ln: ln, snap: snap, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

// Path returns the socket's path.
func (s *Server) Path() string { return s.path }

func (s *Server) serve() {
	defer close(s.done)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		snap := s.snap()
		if snap != nil {
			snap.Time = time.Now()
			json.NewEncoder(c).Encode(snap)
		}
		c.Close()
	}
}

// Close stops serving and removes the socket file. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.ln.Close()
		<-s.done
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("statsock: %w", s.closeErr)
		}
	})
	return s.closeErr
}

// Process is a running process with a socket.
type Process struct {
	PID  int
	Path string
}

// List returns the processes with a socket in dir that still run, by pid.
// A missing dir means none.
func List(dir string) ([]Process, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("statsock: %w", err)
	}
	var ps []Process
	for _, e := range ents {
		pid, ok := pidOf(e.Name())
		if !ok || !alive(pid) {
			continue
		}
		ps = append(ps, Process{PID: pid, Path: filepath.Join(dir, e.Name())})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].PID < ps[j].PID })
	return ps, nil
}

// pidOf parses "<pid>.sock".
func pidOf(name string) (int, bool) {
	s, ok := strings.CutSuffix(name, ".sock")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(s)
	return pid, err == nil && pid > 0
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// removeStale removes sockets in dir whose process is gone.
func removeStale(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if pid, ok := pidOf(e.Name()); ok && !alive(pid) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// ErrNoProcess says that nothing listens on a socket any more.
var ErrNoProcess = errors.New("statsock: process not running")

// Read fetches one snapshot from the socket at path, within ctx and at most
// 2 s.
func Read(ctx context.Context, path string) (*Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", ErrNoProcess, err)
		}
		return nil, fmt.Errorf("statsock: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()
	var s Snapshot
	if err := json.NewDecoder(c).Decode(&s); err != nil {
		return nil, fmt.Errorf("statsock: read %s: %w", path, err)
	}
	return &s, nil
}

// Lookup returns the value of the counter name, and whether it is there.
func Lookup(cs []Counter, name string) (uint64, bool) {
	for _, c := range cs {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}
