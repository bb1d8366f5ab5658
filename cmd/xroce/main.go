// Command xroce is the command-line face of the xroce RoCE v2 stack: it decodes
// captures today, and grows the lab demo, pingpong, perf and stat subcommands.
// Run `xroce help` for the list.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/xroce/xroce/cmd/xroce/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !cli.Reported(err) {
			fmt.Fprintln(os.Stderr, "xroce:", err)
		}
		os.Exit(cli.ExitCode(err))
	}
}
