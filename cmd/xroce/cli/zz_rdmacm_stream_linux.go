//go:build linux

package cli

import (
	"errors"
	"io"

	"github.com/xroce/xroce/stream"
)

// errText is an error as perror would say it, when it is one of the
// usual ones.
func errText(err error) string {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "Connection reset by peer (the peer closed)"
	case errors.Is(err, stream.ErrReset):
		return "Connection reset by peer: " + err.Error()
	}
	return err.Error()
}
