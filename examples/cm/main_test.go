package main

import (
	"strings"
	"testing"

	"github.com/xroce/xroce/examples/internal/extest"
)

func TestRun(t *testing.T) {
	server, client := extest.Run(t, run)
	for _, want := range []string{`private data "hello"`, `server: received "hello over rdma_cm"`,
		"server: cm: disconnected by the peer", `client: connected to 198.18.0.2:7471, private data "welcome"`, "client: sent, disconnecting"} {
		if !strings.Contains(server+client, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
