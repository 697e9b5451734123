// The default budget: a fraction of the cgroup's limit, GOMEMLIMIT or the
// machine's memory.

package membudget

import (
	"bufio"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Fraction of the process's memory limit that the budget takes by default:
// the rest is the Go runtime, gRPC's buffers, caches and stacks.
const defaultFraction = 0.6

// Default is the budget a process gets without --memory-limit, and where
// it came from: 60% of the cgroup's memory limit, else of GOMEMLIMIT, else
// 25% of the machine's memory (a shared host), else 1 GiB.
func Default() (int64, string) {
	if n, ok := cgroupLimit(); ok {
		return int64(float64(n) * defaultFraction), "60% of the cgroup memory limit"
	}
	if n := debug.SetMemoryLimit(-1); n > 0 && n < math.MaxInt64 {
		return int64(float64(n) * defaultFraction), "60% of GOMEMLIMIT"
	}
	if n, ok := memTotal(); ok {
		return n / 4, "25% of the machine's memory"
	}
	return 1 << 30, "built-in default"
}

// cgroupLimit reads the memory limit of this process's cgroup (v2, then
// v1); no limit is not ok.
func cgroupLimit() (int64, bool) {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		// cgroup v1 reports "no limit" as a huge page-aligned number.
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, false
		}
		if m, ok := memTotal(); ok && n >= m {
			return 0, false // no tighter than the machine
		}
		return n, true
	}
	return 0, false
}

func memTotal() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb << 10, true
			}
		}
	}
	return 0, false
}
