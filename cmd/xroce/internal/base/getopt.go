package base

import (
	"fmt"
	"math"
	"strings"
)

// The clones of rdma-core's librdmacm examples (rping, ucmatose, udaddy,
// rdma_server, rdma_client) read their command lines as the originals do,
// with glibc's getopt(3), so that a script written for one runs the other:
// clustered flags (-vVd), an argument stuck to its flag (-S64) or in the
// next word, operands anywhere (glibc permutes them to the end), "--" ends
// the flags. Their numbers are read with atoi and strtoul, garbage and all.

// option is one flag getopt returned: its letter and its argument, or
// letter '?' for a mistake, with glibc's message for it.
type Option struct {
	C   byte
	Arg string
	Msg string // for '?': "invalid option -- 'x'" or "option requires an argument -- 'x'"
}

// getopt returns the flags of args (without the program name) as glibc's
// getopt with optstring returns them, in order, up to and including the
// first mistake; and the operands.
func Getopt(args []string, optstring string) (opts []Option, operands []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return opts, append(operands, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			operands = append(operands, a)
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			k := strings.IndexByte(optstring, c)
			if k < 0 || c == ':' {
				return append(opts, Option{C: '?', Msg: fmt.Sprintf("invalid option -- '%c'", c)}), operands
			}
			if k+1 >= len(optstring) || optstring[k+1] != ':' {
				opts = append(opts, Option{C: c})
				continue
			}
			switch {
			case j+1 < len(a):
				opts = append(opts, Option{C: c, Arg: a[j+1:]})
			case i+1 < len(args):
				i++
				opts = append(opts, Option{C: c, Arg: args[i]})
			default:
				return append(opts, Option{C: '?', Msg: fmt.Sprintf("option requires an argument -- '%c'", c)}), operands
			}
			break
		}
	}
	return opts, operands
}

// atoi is C's atoi as glibc has it, (int)strtol(s, NULL, 10): leading
// white space, a sign, the digits up to the first other byte; 0 for none;
// a long that overflows saturates, then the cast keeps the low 32 bits.
func Atoi(s string) int {
	v, _ := Strtol(s, 10)
	return int(int32(v))
}

// strtoul8 is (uint8_t)strtoul(s, NULL, 0): C's base prefixes (0x, 0),
// a negative number wraps as an unsigned long.
func Strtoul8(s string) uint8 {
	v, _ := Strtol(s, 0)
	return uint8(v)
}

// strtol parses s as strtol does in base 10 or, base 0, with C's prefixes;
// it returns the value (saturated at the int64 range) and whether a minus
// sign was read.
func Strtol(s string, base int) (int64, bool) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] >= '\t' && s[i] <= '\r') {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	if base == 0 {
		base = 10
		if i+1 < len(s) && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X') && i+2 < len(s) && hexDigit(s[i+2]) >= 0 {
			base, i = 16, i+2
		} else if i < len(s) && s[i] == '0' {
			base = 8
		}
	}
	var v uint64
	over := false
	for ; i < len(s); i++ {
		d := hexDigit(s[i])
		if d < 0 || d >= base {
			break
		}
		if v > (math.MaxUint64-uint64(d))/uint64(base) {
			over = true
		}
		v = v*uint64(base) + uint64(d)
	}
	switch {
	case neg && (over || v > 1<<63):
		return math.MinInt64, true
	case neg:
		return -int64(v), true
	case over || v > math.MaxInt64:
		return math.MaxInt64, false
	}
	return int64(v), false
}

func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
