//go:build linux

package rdmacm

import (
	"errors"
	"io"

	"github.com/xroce/xroce/stream"
)

// ErrText is an error as perror would say it, when it is one of the
// usual ones.
func ErrText(err error) string {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "Connection reset by peer (the peer closed)"
	case errors.Is(err, stream.ErrReset):
		return "Connection reset by peer: " + err.Error()
	}
	return err.Error()
}
