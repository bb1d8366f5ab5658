package cli

import (
	"bytes"
	"context"
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
