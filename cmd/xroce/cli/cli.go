// Package cli implements the xroce command: one binary with subcommands, each
// a function from arguments to an error, so tests can drive them without a
// process and main stays a few lines.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// A command is one xroce subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a subcommand writes to.
type env struct {
	stdout io.Writer
	stderr io.Writer
}

// commands are the subcommands; each file that implements one registers it
// from an init function.
var commands []command

// register adds a subcommand. It is called from init functions only.
func register(name, summary string, run func(ctx context.Context, env *env, args []string) error) {
	commands = append(commands, command{name: name, summary: summary, run: run})
}

// errUsage marks an error in the command line; the command exits with 2.
var errUsage = errors.New("usage")

// usageError is a command-line mistake: what was wrong and where to get help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Is(target error) bool {
	return target == errUsage
}

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitStatus ends a command that has printed its own messages, as the C
// program it clones does (rping, ucmatose, rdma_server ...), with that
// program's exit status; a negative status is its low byte, as the shell
// sees it (-1 is 255).
type exitStatus int

func (s exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(s)&0xff) }

// status returns the error that ends a command with exit status code: nil
// for 0.
func status(code int) error {
	if code == 0 {
		return nil
	}
	return exitStatus(code)
}

// Reported reports whether the command that returned err has printed what
// went wrong itself, so that main adds nothing and exits with ExitCode.
func Reported(err error) bool {
	var s exitStatus
	return errors.As(err, &s)
}

// ExitCode is the process exit status for an error returned by Run: the
// cloned program's own status for the tools that print their own
// messages, 2 for a bad command line (as the standard flag package does),
// 1 otherwise.
func ExitCode(err error) int {
	var s exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &s):
		return int(s) & 0xff
	case errors.Is(err, errUsage):
		return 2
	default:
		return 1
	}
}

// Run runs the xroce command with args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		printHelp(stderr)
		return usagef("no command given; see 'xroce help'")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			if c := lookup(rest[0]); c != nil {
				// The clones of C tools print their usage and exit with
				// their status; asking for help is no failure.
				if err := c.run(ctx, e, []string{"-h"}); !Reported(err) {
					return err
				}
				return nil
			}
			return usagef("unknown command %q; see 'xroce help'", rest[0])
		}
		printHelp(stdout)
		return nil
	case "-V", "-version", "--version":
		name = "version"
	}
	c := lookup(name)
	if c == nil {
		return usagef("unknown command %q; see 'xroce help'", name)
	}
	err := c.run(ctx, e, rest)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "xroce: RoCE v2 (RDMA over Converged Ethernet) in user space, in pure Go.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: xroce <command> [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for _, c := range commands {
		names = append(names, c.name)
	}
	sort.Strings(names)
	width := 10
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width, n, lookup(n).summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'xroce help <command>' or 'xroce <command> -h' for a command's flags and examples.")
}

// newFlagSet makes a flag set that prints the command's usage, flags and
// examples to stderr, and returns errors instead of exiting.
func newFlagSet(e *env, name, synopsis, about, examples string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
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

// parseFlags parses args and turns flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%s: %v", fs.Name(), err)
	}
	return nil
}

var errHelp = flag.ErrHelp
