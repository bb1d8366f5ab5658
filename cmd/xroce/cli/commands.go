package cli

import (
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/dump"
	"github.com/xroce/xroce/cmd/xroce/internal/lab"
	"github.com/xroce/xroce/cmd/xroce/internal/pingpong"
	"github.com/xroce/xroce/cmd/xroce/internal/stat"
	"github.com/xroce/xroce/cmd/xroce/internal/version"
)

// commands are the subcommands: every tool package's commands, listed here
// and nowhere else. (Tools not yet in a package of their own append theirs
// from init functions, which run after this list is made.)
var commands = []base.Command{
	dump.Cmd,
	lab.Cmd,
	pingpong.Cmd,
	stat.Cmd,
	version.Cmd,
}
