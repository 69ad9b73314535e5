package dataplane

import (
	"errors"
	"strings"
)

// SetProto is the protocol as ipset entries and iptables matches spell it
// ("tcp", "udp", "sctp").
func (p Protocol) SetProto() string {
	switch p {
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return "tcp"
}

// SplitRule splits one iptables-restore / iptables-save rule line into words
// the way iptables-restore does: blanks separate words except inside double
// quotes, where a backslash escapes the next character. Every reader of rule
// text (the in-memory kernel, ParseSave) splits alike; FormatRule writes
// what it reads back.
func SplitRule(line string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			quoted = !quoted
			inWord = true
		case c == '\\' && quoted && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
