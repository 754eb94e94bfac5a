package main

import "strings"

// splitStatements splits SQL text into its statements, at semicolons
// outside string literals ('…'), quoted names ("…", `…`, […]) and
// comments (-- to the end of the line, /* … */). Statements that hold
// nothing but blanks and comments are dropped; each statement keeps its
// text without the semicolon. (A CREATE TRIGGER body, whose inner
// statements end in semicolons, would be cut; sql's databases are read
// only, so no trigger can be made.)
func splitStatements(q string) []string {
	var out []string
	start, hasCode := 0, false
	flush := func(end int) {
		if hasCode {
			out = append(out, strings.TrimSpace(q[start:end]))
		}
		start, hasCode = end+1, false
	}
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'' || c == '"' || c == '`' || c == '[':
			closer := c
			if c == '[' {
				closer = ']'
			}
			hasCode = true
			for i++; i < len(q); i++ {
				if q[i] == closer {
					// A doubled quote is one quote inside the literal.
					if closer != ']' && i+1 < len(q) && q[i+1] == closer {
						i++
						continue
					}
					break
				}
			}
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				i = len(q)
			} else {
				i += end + 3
			}
		case c == ';':
			flush(i)
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
		default:
			hasCode = true
		}
	}
	flush(len(q))
	return out
}
