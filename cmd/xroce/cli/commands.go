package cli

import (
	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/cmd/xroce/internal/conform"
	"github.com/xroce/xroce/cmd/xroce/internal/dump"
	"github.com/xroce/xroce/cmd/xroce/internal/lab"
	"github.com/xroce/xroce/cmd/xroce/internal/perf"
	"github.com/xroce/xroce/cmd/xroce/internal/pingpong"
	"github.com/xroce/xroce/cmd/xroce/internal/rcopy"
	"github.com/xroce/xroce/cmd/xroce/internal/rdmaep"
	"github.com/xroce/xroce/cmd/xroce/internal/rping"
	"github.com/xroce/xroce/cmd/xroce/internal/rstream"
	"github.com/xroce/xroce/cmd/xroce/internal/stat"
	"github.com/xroce/xroce/cmd/xroce/internal/ucmatose"
	"github.com/xroce/xroce/cmd/xroce/internal/udaddy"
	"github.com/xroce/xroce/cmd/xroce/internal/version"
)

// commands are the subcommands: every tool package's commands, listed here
// and nowhere else. A tool package exports its command as Cmd (rdmaep:
// Server and Client) and imports no other tool package
// (TestToolsImportNoTool).
var commands = []base.Command{
	conform.Cmd,
	dump.Cmd,
	lab.Cmd,
	perf.Cmd,
	pingpong.Cmd,
	rcopy.Cmd,
	rdmaep.Client,
	rdmaep.Server,
	rping.Cmd,
	rstream.Cmd,
	stat.Cmd,
	ucmatose.Cmd,
	udaddy.Cmd,
	version.Cmd,
}
