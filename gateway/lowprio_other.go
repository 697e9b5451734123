//go:build !linux

package gateway

// lowerPriority does nothing where thread priorities are not set.
func lowerPriority(int) (lowered, onMain bool) { return false, false }
