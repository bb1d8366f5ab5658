// The formats every tool prints with.

package base

import "fmt"

// Plural formats a count of things: 1 queue, 2 queues.
func Plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
