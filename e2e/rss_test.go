package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MiB is a mebibyte, for the memory bounds of the robustness suites.
const MiB = 1 << 20

// memoryLimit returns the --memory-limit flag (issue 12) the robustness
// suites pass to serve, gateway and codec-worker. A binary that does not
// know the flag exits at start, and the suite fails there.
func memoryLimit(v string) []string { return []string{"--memory-limit", v} }

// statusBytes reads a kB field of /proc/PID/status (VmRSS, VmHWM) in bytes.
// procStatus in bench_test.go does the same for benchmarks only (it takes a
// *testing.B); this one returns its error, since the process may have died.
func statusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// resetPeak resets the process's VmHWM to its current RSS (Linux ≥ 4.0),
// so that a peak measured afterwards belongs to what follows, not to the
// setup before it.
func resetPeak(pid int) error {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}

// cpuTime is the user + system CPU time the process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start at the
	// last ')': state is field 3, utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	// USER_HZ is 100 on every Linux ABI Go supports.
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

// rssWatch samples a process's memory every interval until stopped: the
// highest VmHWM and VmRSS seen (VmHWM can no longer be read once the
// process is gone, so the samples are what is left of a crash). Above
// killAt bytes it kills the process, so that a server gone wild fails its
// test instead of taking the shared machine's memory; killed says so.
type rssWatch struct {
	pid    int
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	hwm    int64
	maxRSS int64
	killed bool
}

func watchRSS(pid int, interval time.Duration, killAt int64) *rssWatch {
	w := &rssWatch{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			w.sample(killAt)
			select {
			case <-w.stop:
				w.sample(killAt)
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *rssWatch) sample(killAt int64) {
	hwm, err1 := statusBytes(w.pid, "VmHWM")
	rss, err2 := statusBytes(w.pid, "VmRSS")
	if err1 != nil || err2 != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hwm = max(w.hwm, hwm)
	w.maxRSS = max(w.maxRSS, rss)
	if killAt > 0 && rss > killAt && !w.killed {
		if p, err := os.FindProcess(w.pid); err == nil {
			p.Kill()
		}
		w.killed = true
	}
}

// finish stops sampling and returns the peak (the highest VmHWM seen) and
// whether the watch killed the process.
func (w *rssWatch) finish() (peak int64, killed bool) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.hwm, w.maxRSS), w.killed
}

// alive reports whether a started server is still running: its process
// has not exited (a zombie counts as exited: it is dead but not yet
// reaped by startCommand's goroutine).
func (s *server) alive() bool {
	select {
	case err := <-s.done:
		s.done <- err // keep it for others who wait on it
		return false
	default:
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// exited waits up to d for a started server to exit (a crash takes a
// moment: the runtime prints every goroutine first) and reports whether it
// did.
func (s *server) exited(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !s.alive() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return !s.alive()
}

// mib formats bytes as MiB for the suites' tables.
func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/MiB) }
