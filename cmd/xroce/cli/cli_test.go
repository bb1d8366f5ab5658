package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// 'xroce --version' and 'xroce -V' are 'xroce version'.
func TestVersionAliases(t *testing.T) {
	var want bytes.Buffer
	if err := Run(context.Background(), []string{"version"}, &want, &bytes.Buffer{}); err != nil {
		t.Fatalf("xroce version: %v", err)
	}
	for _, alias := range []string{"--version", "-V", "-version"} {
		var out, errOut bytes.Buffer
		if err := Run(context.Background(), []string{alias}, &out, &errOut); err != nil {
			t.Fatalf("xroce %s: %v (%s)", alias, err, errOut.String())
		}
		if out.String() != want.String() {
			t.Errorf("xroce %s = %q, want xroce version's %q", alias, out.String(), want.String())
		}
	}
}

// run runs the xroce command line args as main does, for the dispatcher's
// tests (the tools' tests run their commands with clitest's Run and RunIn).
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = Run(context.Background(), args, &o, &e)
	return o.String(), e.String(), err
}

// TestUsage checks the dispatcher's own usage errors and that help lists
// the commands of commands.go (the tools' own usage is tested in their
// packages).
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no command"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		_, _, err := run(t, tc.args...)
		if ExitCode(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("xroce %q: err %v (exit %d), want exit %d mentioning %q", tc.args, err, ExitCode(err), tc.code, tc.want)
		}
	}
	out, _, err := run(t, "help")
	if err != nil || !strings.Contains(out, "dump") {
		t.Errorf("help: %v\n%s", err, out)
	}
}

// TestCommandNames: commands.go names each command once (lookup would find
// the first of two), and each has a summary for the help.
func TestCommandNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range commands {
		if c.Name == "" || seen[c.Name] || c.Summary == "" || c.Run == nil {
			t.Errorf("command %q: empty, listed twice, or no summary or Run", c.Name)
		}
		seen[c.Name] = true
	}
}
