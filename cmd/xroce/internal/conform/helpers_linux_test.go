package conform

import (
	"context"
	"io"

	"github.com/xroce/xroce/cmd/xroce/internal/rdmacm/cmtest"
)

// runCmd runs xroce conform with args, which start with "conform", as
// cli.Run would.
func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cmtest.Run(ctx, Cmd, args, stdout, stderr)
}
