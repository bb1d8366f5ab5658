package main

import (
	"strings"
	"testing"

	"github.com/xroce/xroce/examples/internal/extest"
)

func TestRun(t *testing.T) {
	server, client := extest.Run(t, run)
	for _, want := range wantOutput {
		if !strings.Contains(server+client, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
