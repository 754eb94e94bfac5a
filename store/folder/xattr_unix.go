//go:build linux || darwin

package folder

import (
	"os"

	"golang.org/x/sys/unix"
)

// getAttr reads the extended attribute name of f.
func getAttr(f *os.File, name string) (string, error) {
	buf := make([]byte, 128)
	n, err := unix.Fgetxattr(int(f.Fd()), name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// setAttr sets the extended attribute name of f.
func setAttr(f *os.File, name, value string) error {
	return unix.Fsetxattr(int(f.Fd()), name, []byte(value), 0)
}
