//go:build linux

package main

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
)

// profileEnv names a directory where each xroce role writes a CPU profile
// (role.cpu) and an execution trace (role.trace) of its whole run, for
// `go tool pprof` and `go tool trace` (its -pprof=sched view is where the
// wake-ups show). Both cost some time; compare runs made alike.
const profileEnv = "BENCHREPORT_PROFILE"

// startProfile starts the profile and trace of role when profileEnv is
// set, and returns the function that stops them.
func startProfile(role string) (stop func() error, err error) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() error { return nil }, nil
	}
	cpu, err := os.Create(filepath.Join(dir, role+".cpu"))
	if err != nil {
		return nil, err
	}
	tr, err := os.Create(filepath.Join(dir, role+".trace"))
	if err != nil {
		cpu.Close()
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		tr.Close()
		return nil, err
	}
	if err := trace.Start(tr); err != nil {
		pprof.StopCPUProfile()
		cpu.Close()
		tr.Close()
		return nil, err
	}
	return func() error {
		trace.Stop()
		pprof.StopCPUProfile()
		return errors.Join(tr.Close(), cpu.Close())
	}, nil
}
