//go:build !linux

package gateway

// lowerPriority does nothing where thread priorities are not set.
func lowerPriority(int) (again bool) { return false }
