// Package statcount turns roce's statistics structs into the named
// counters that internal/statsock serves and xroce stat prints: what lab
// and perf publish and stat's tests read back.
package statcount

import (
	"reflect"
	"strings"
	"unicode"

	"github.com/xroce/xroce/internal/statsock"
)

// Of flattens a struct of counters (roce.Stats and the like) into
// named counters: each unsigned or int field, named in snake case
// (RxBadICRC → rx_bad_icrc, MRs → mrs). Other fields are skipped.
func Of(v any) []statsock.Counter {
	rv := reflect.Indirect(reflect.ValueOf(v))
	if rv.Kind() != reflect.Struct {
		return nil
	}
	var out []statsock.Counter
	for i := range rv.NumField() {
		f, ft := rv.Field(i), rv.Type().Field(i)
		if !ft.IsExported() {
			continue
		}
		var n uint64
		switch f.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n = f.Uint()
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n = uint64(max(f.Int(), 0))
		default:
			continue
		}
		out = append(out, statsock.Counter{Name: snake(ft.Name), Value: n})
	}
	return out
}

// snake turns a Go field name into snake case, keeping acronyms together:
// RxFrames → rx_frames, RNRNaksRx → rnr_naks_rx, RxBadICRC → rx_bad_icrc.
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			acronymEnd := unicode.IsUpper(r[i-1]) && nextLower && !(i+2 == len(r) && r[i+1] == 's')
			if prevLower || acronymEnd {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
