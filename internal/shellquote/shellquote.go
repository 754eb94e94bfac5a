// Package shellquote renders a command's arguments as a POSIX shell
// command line, for messages and reports that show a command to run.
package shellquote

import "strings"

// Join renders args as one line a shell splits back into args: an
// argument of only safe characters as it is, any other in single quotes
// (a single quote inside closes the quotes, adds \' and opens them again).
func Join(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, unsafe) < 0 {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// unsafe reports whether r needs quoting.
func unsafe(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@%+", r))
}
