// Package cli implements the xroce command: one binary with subcommands, each
// a base.Command, a function from arguments to an error, so tests can drive
// them without a process and main stays a few lines. commands.go lists the
// tool packages; this file dispatches to them and prints the help.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
)

// Reported reports whether the command that returned err has printed what
// went wrong itself, so that main adds nothing and exits with ExitCode.
func Reported(err error) bool { return base.Reported(err) }

// ExitCode is the process exit status for an error returned by Run: the
// cloned program's own status for the tools that print their own
// messages, 2 for a bad command line (as the standard flag package does),
// 1 otherwise.
func ExitCode(err error) int { return base.ExitCode(err) }

// Run runs the xroce command with args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &base.Env{Stdout: stdout, Stderr: stderr}
	if len(args) == 0 {
		printHelp(stderr)
		return base.Usagef("no command given; see 'xroce help'")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			if c := lookup(rest[0]); c != nil {
				// The clones of C tools print their usage and exit with
				// their status; asking for help is no failure.
				if err := c.Run(ctx, e, []string{"-h"}); !Reported(err) {
					return err
				}
				return nil
			}
			return base.Usagef("unknown command %q; see 'xroce help'", rest[0])
		}
		printHelp(stdout)
		return nil
	case "-V", "-version", "--version":
		name = "version"
	}
	c := lookup(name)
	if c == nil {
		return base.Usagef("unknown command %q; see 'xroce help'", name)
	}
	err := c.Run(ctx, e, rest)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func lookup(name string) *base.Command {
	for i := range commands {
		if commands[i].Name == name {
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
		names = append(names, c.Name)
	}
	sort.Strings(names)
	width := 10
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width, n, lookup(n).Summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'xroce help <command>' or 'xroce <command> -h' for a command's flags and examples.")
}
