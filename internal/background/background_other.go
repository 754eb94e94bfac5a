//go:build !linux

package background

// Run runs fn: there is no lower priority to set here.
func Run(fn func()) { fn() }
