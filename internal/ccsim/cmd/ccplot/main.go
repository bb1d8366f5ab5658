// Command ccplot runs the congestion-control simulations of package ccsim
// and writes their plots (SVG) for docs/congestion.md:
//
//	go run ./internal/ccsim/cmd/ccplot -o docs
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/xroce/xroce/internal/ccsim"
)

func main() {
	dir := flag.String("o", "docs", "write the SVG files into `dir`")
	flag.Parse()
	lines, err := ccsim.Plot(*dir)
	for _, l := range lines {
		fmt.Println(l)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ccplot:", err)
		os.Exit(1)
	}
}
