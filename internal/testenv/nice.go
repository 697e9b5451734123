package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ThreadNices counts the threads of process pid (0: this one) by nice
// value (/proc/PID/task/*/stat, field 19); nil, and t failed, if it
// cannot.
func ThreadNices(t testing.TB, pid int) map[int]int {
	t.Helper()
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	stats, err := filepath.Glob(dir + "/*/stat")
	if err != nil || len(stats) == 0 {
		t.Errorf("no threads under %s: %v", dir, err)
		return nil
	}
	nices := map[int]int{}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // from field 3, the state
		n, err := strconv.Atoi(fields[19-3])
		if err != nil {
			t.Errorf("%s: nice %q: %v", f, fields[19-3], err)
			return nil
		}
		nices[n]++
	}
	return nices
}
