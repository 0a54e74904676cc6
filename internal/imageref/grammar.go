package imageref

import "strings"

func lowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func alnum(c byte) bool { return lowerAlnum(c) || c >= 'A' && c <= 'Z' }

func word(c byte) bool { return alnum(c) || c == '_' }

// validPathComponent: runs of [a-z0-9] joined by ".", "_", "__" or "-"+.
func validPathComponent(s string) bool {
	if s == "" || !lowerAlnum(s[0]) || !lowerAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); {
		if lowerAlnum(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && !lowerAlnum(s[j]) {
			j++
		}
		if sep := s[i:j]; sep != "." && sep != "_" && sep != "__" && strings.Trim(sep, "-") != "" {
			return false
		}
		i = j
	}
	return true
}

// validDomain: dot-separated components of letters, digits and inner
// '-', then an optional ":port".
func validDomain(s string) bool {
	host, port, hasPort := strings.Cut(s, ":")
	if hasPort && (port == "" || strings.Trim(port, "0123456789") != "") {
		return false
	}
	for c := range strings.SplitSeq(host, ".") {
		if c == "" || !alnum(c[0]) || !alnum(c[len(c)-1]) || strings.IndexFunc(c, func(r rune) bool { return r > 0x7f || !alnum(byte(r)) && r != '-' }) >= 0 {
			return false
		}
	}
	return true
}

// validTag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
func validTag(s string) bool {
	if s == "" || len(s) > maxTagLength || !word(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !word(s[i]) && s[i] != '.' && s[i] != '-' {
			return false
		}
	}
	return true
}

// validDigest: a known algorithm and exactly its length of lower-case hex.
func validDigest(s string) bool {
	alg, hex, _ := strings.Cut(s, ":")
	n, ok := digestHexLength[alg]
	return ok && len(hex) == n && strings.Trim(hex, "0123456789abcdef") == ""
}
