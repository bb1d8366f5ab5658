//go:build linux

package conform

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/xroce/xroce/cmd/xroce/internal/base"
	"github.com/xroce/xroce/conform"
)

// A profile is what a device under test is known to do: the verdict of
// each check through each tool, one line each, "ROLE TOOL CHECK VERDICT"
// (ROLE via or serve), '#' comments. VERDICT may name alternatives,
// "PASS|FAIL", for a check whose verdict depends on timing the device
// does not hold to (rxe's retransmit timer under an emulator). The
// interop suite keeps rxe's (interop/testdata/conform-GEN.txt) and fails
// a row whose verdicts move.
type profile map[string][]conform.Verdict

func profileKey(role, tool, check string) string { return role + " " + tool + " " + check }

// readProfile reads a profile file.
func readProfile(path string) (profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := profile{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		bad := len(fs) != 4 || fs[0] != "via" && fs[0] != "serve"
		var vs []conform.Verdict
		if !bad {
			for _, a := range strings.Split(fs[3], "|") {
				var v conform.Verdict
				if v.UnmarshalText([]byte(a)) != nil {
					bad = true
					break
				}
				vs = append(vs, v)
			}
		}
		if bad {
			return nil, fmt.Errorf("%s:%d: want ROLE TOOL CHECK VERDICT (ROLE via or serve, VERDICT PASS, FAIL, KNOWN or SKIP, or alternatives such as PASS|FAIL), got %q", path, n, sc.Text())
		}
		p[profileKey(fs[0], fs[1], fs[2])] = vs
	}
	return p, sc.Err()
}

// verdicts writes alternatives as a profile does: PASS|FAIL.
func verdicts(vs []conform.Verdict) string {
	ss := make([]string, len(vs))
	for i, v := range vs {
		ss[i] = v.String()
	}
	return strings.Join(ss, "|")
}

// role names the run's role as profiles do.
func (o *conformOptions) role() string {
	if o.serve != "" {
		return "serve"
	}
	return "via"
}

// profileOf returns rs as profile lines.
func (o *conformOptions) profileOf(rs []conform.Result) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%s %-15s %-26s %v\n", o.role(), o.tool.name, r.Name, r.Verdict)
	}
	return b.String()
}

// compareProfile says how rs compare with the -expect profile, in one
// last line, and returns exit status 1 if a verdict differs or a check
// has none there.
func (o *conformOptions) compareProfile(w io.Writer, rs []conform.Result) error {
	var diff []string
	for _, r := range rs {
		want, ok := o.expected[profileKey(o.role(), o.tool.name, r.Name)]
		switch {
		case !ok:
			diff = append(diff, fmt.Sprintf("%s %v (not in the profile)", r.Name, r.Verdict))
		case !slices.Contains(want, r.Verdict):
			diff = append(diff, fmt.Sprintf("%s %v (expected %v)", r.Name, r.Verdict, verdicts(want)))
		}
	}
	if len(diff) > 0 {
		fmt.Fprintf(w, "profile %s: %d of %d checks differ: %s\n", o.expect, len(diff), len(rs), strings.Join(diff, "; "))
		return base.Status(1)
	}
	fmt.Fprintf(w, "profile %s: all %d checks as expected\n", o.expect, len(rs))
	return nil
}
