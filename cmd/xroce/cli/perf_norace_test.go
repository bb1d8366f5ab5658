//go:build !race

package cli

// testSlowdown stretches the tests' overall deadlines (see perf_race_test.go).
const testSlowdown = 1
