package base

import (
	"fmt"
	"slices"
	"testing"
)

// getopt as glibc's: clusters, stuck and separate arguments, operands
// permuted to the end, "--", and the first mistake ends the list.
func TestRpingGetopt(t *testing.T) {
	const optstring = "a:I:Pp:C:S:t:scvVdq"
	for _, tc := range []struct {
		args     []string
		opts     string // letter=arg, space separated
		operands []string
	}{
		{nil, "", nil},
		{[]string{"-s", "-v"}, "s v", nil},
		{[]string{"-svVd"}, "s v V d", nil},
		{[]string{"-S64", "-C", "3"}, "S=64 C=3", nil},
		{[]string{"-cvC", "5", "-a", "198.18.0.2"}, "c v C=5 a=198.18.0.2", nil},
		{[]string{"-a", "-v"}, "a=-v", nil}, // an argument may start with a dash
		{[]string{"x", "-s", "y", "-p", "9"}, "s p=9", []string{"x", "y"}},
		{[]string{"-s", "--", "-v"}, "s", []string{"-v"}},
		{[]string{"-", "-s"}, "s", []string{"-"}},
		{[]string{"-sx", "-v"}, "s ?=invalid option -- 'x'", nil},
		{[]string{"--help"}, "?=invalid option -- '-'", nil},
		{[]string{"-v", "-C"}, "v ?=option requires an argument -- 'C'", nil},
		{[]string{"-h"}, "?=invalid option -- 'h'", nil},
		{[]string{"-t", "3"}, "t=3", nil},
	} {
		opts, operands := Getopt(tc.args, optstring)
		var got []string
		for _, o := range opts {
			switch {
			case o.C == '?':
				got = append(got, "?="+o.Msg)
			case o.Arg != "":
				got = append(got, fmt.Sprintf("%c=%s", o.C, o.Arg))
			default:
				got = append(got, string(o.C))
			}
		}
		if s := fmt.Sprint(got); s != fmt.Sprint(splitFields(tc.opts)) || !slices.Equal(operands, tc.operands) {
			t.Errorf("getopt(%q) = %s, operands %q; want [%s], %q", tc.args, s, operands, tc.opts, tc.operands)
		}
	}
}

// splitFields splits on spaces, except inside a message after "?=".
func splitFields(s string) []string {
	var out []string
	for s != "" {
		if len(s) > 1 && s[0] == '?' && s[1] == '=' {
			return append(out, s)
		}
		i := 0
		for i < len(s) && s[i] != ' ' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

func TestRpingAtoi(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"64", 64}, {"  12abc", 12}, {"abc", 0}, {"", 0}, {"-5", -5}, {"+7", 7}, {"0x10", 0},
		{"99999999999", 1215752191},  // (int)strtol: the low 32 bits
		{"99999999999999999999", -1}, // strtol saturates at LONG_MAX, whose low 32 bits are -1
		{"-99999999999999999999", 0}, // LONG_MIN's low 32 bits
		{"\t\n 42", 42}, {"4 2", 4}, {"0777", 777},
	} {
		if got := Atoi(tc.in); got != tc.want {
			t.Errorf("atoi(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want uint8
	}{
		{"0", 0}, {"32", 32}, {"0x20", 32}, {"040", 32}, {"300", 44}, {"-1", 255}, {"junk", 0}, {"0x", 0}, {"09", 0},
	} {
		if got := Strtoul8(tc.in); got != tc.want {
			t.Errorf("strtoul8(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
