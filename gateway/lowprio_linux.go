//go:build linux

package gateway

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// lowerPriority moves the calling goroutine onto a thread of its own whose
// nice value is n above its thread's (at most 19), for a chunk worker of a
// call that shares the gateway with others: when the others' threads (or
// other processes) wake, the kernel runs them first instead of sharing the
// cores with the big call's decodes. Go's scheduler has no priorities; the
// kernel's are per thread, so the worker keeps the thread (LockOSThread)
// and must end without unlocking it: the runtime then ends the thread with
// the goroutine, since an unprivileged process cannot raise a thread's
// priority again. Threads Go starts while a locked goroutine runs are
// started by its template thread, so no other thread inherits the lower
// priority. RocksDB does the same with its compaction threads
// (Env::LowerThreadPoolCPUPriority). Never on the process's main thread,
// which the runtime does not end (it parks it for good instead) and whose
// nice value tools such as ps show as the process's.
//
// It reports whether the priority was lowered, and whether the goroutine
// is on the main thread: then it stays locked to it, for the caller to
// start the work on another goroutine (which the runtime cannot run on
// the main thread while this one holds it) and then unlock. When
// setpriority is refused (a sandbox), neither, and the goroutine is not
// locked.
func lowerPriority(n int) (lowered, onMain bool) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	if tid == unix.Getpid() {
		return false, true
	}
	// The system call returns 20 - nice.
	cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err == nil {
		err = unix.Setpriority(unix.PRIO_PROCESS, tid, min(19, 20-cur+n))
	}
	if err != nil {
		runtime.UnlockOSThread()
		return false, false
	}
	return true, false
}
