package main

import "runtime"

// The CPU figures are per thread (RUSAGE_THREAD): each side keeps to one.
func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }
