// Package base is what every xroce tool is made of: the Command each tool
// package exports and package cli lists, the Env a command writes to, usage
// errors and exit statuses (with the exit codes main turns them into), the
// flag sets with the command's usage and examples, and glibc's getopt for
// the clones of rdma-core's tools, whose command lines must read as the
// originals', and the formats tools print with (format.go). It imports no
// tool; every tool may import it.
package base

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// A Command is one xroce subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, env *Env, args []string) error
}

// Env is what a subcommand writes to.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
}

// ErrUsage marks an error in the command line; the command exits with 2.
var ErrUsage = errors.New("usage")

// usageError is a command-line mistake: what was wrong and where to get help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Is(target error) bool {
	return target == ErrUsage
}

// Usagef returns a command-line mistake, which makes the command exit with 2.
func Usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// ExitStatus ends a command that has printed its own messages, as the C
// program it clones does (rping, ucmatose, rdma_server ...), with that
// program's exit status; a negative status is its low byte, as the shell
// sees it (-1 is 255).
type ExitStatus int

func (s ExitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)&0xff) }

// Status returns the error that ends a command with exit status code: nil
// for 0.
func Status(code int) error {
	if code == 0 {
		return nil
	}
	return ExitStatus(code)
}

// Reported reports whether the command that returned err has printed what
// went wrong itself, so that main adds nothing and exits with ExitCode.
func Reported(err error) bool {
	var s ExitStatus
	return errors.As(err, &s)
}

// ExitCode is the process exit status for an error returned by a command:
// the cloned program's own status for the tools that print their own
// messages, 2 for a bad command line (as the standard flag package does),
// 1 otherwise.
func ExitCode(err error) int {
	var s ExitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &s):
		return int(s) & 0xff
	case errors.Is(err, ErrUsage):
		return 2
	default:
		return 1
	}
}

// ErrHelp is what a command returns when -h asked for its usage, which it
// has printed; it is no failure.
var ErrHelp = flag.ErrHelp

// NewFlagSet makes a flag set that prints the command's usage, flags and
// examples to stderr, and returns errors instead of exiting.
func NewFlagSet(e *Env, name, synopsis, about, examples string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: xroce %s %s\n\n%s\n", name, synopsis, strings.TrimSpace(about))
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(w, "\nFlags:")
			fs.PrintDefaults()
		}
		if examples != "" {
			fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(examples, "\n"))
		}
	}
	return fs
}

// ParseFlags parses args and turns flag errors into usage errors.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return Usagef("%s: %v", fs.Name(), err)
	}
	return nil
}

// ParseInterspersed parses flags that may come before or after the
// positional arguments, as tcpdump and the perftest tools allow, and returns
// the positional ones. "--" ends the flags.
func ParseInterspersed(fs interface {
	Parse([]string) error
	Args() []string
	Name() string
}, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, ErrHelp) {
				return nil, err
			}
			return nil, Usagef("%s: %v", fs.Name(), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
