// Counts and sizes as people read them: "2 keys", "1.5 MiB", "1 Mi".

package main

import (
	"fmt"
	"strconv"
)

// countOf is "1 key", "2 keys".
func countOf(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 5 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i-1])
}

// humanCount is a power-of-two element count as "1 Mi".
func humanCount(n int64) string {
	for _, u := range []struct {
		n    int64
		name string
	}{{1 << 30, "Gi"}, {1 << 20, "Mi"}, {1 << 10, "Ki"}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d %s", n/u.n, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}
