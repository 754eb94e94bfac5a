//go:build !(linux || darwin)

package folder

import (
	"errors"
	"os"
)

var errNoAttr = errors.New("extended attributes not supported")

// Without extended attributes versions are always computed from contents.

func getAttr(*os.File, string) (string, error) { return "", errNoAttr }

func setAttr(*os.File, string, string) error { return errNoAttr }
