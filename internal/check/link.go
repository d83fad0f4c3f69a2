package check

import (
	"slices"
	"strings"
)

// link is one link-value of an RFC 8288 Link header.
type link struct {
	uri  string
	rels []string // lower-cased relation types
}

func (l link) hasRel(rel string) bool { return slices.Contains(l.rels, rel) }

// parseLinks parses Link field values such as
//
//	</docs/idempotency>; rel="help", <https://example.com/spec>; rel=describedby
//
// It is lenient: a malformed link-value is dropped and parsing resumes at the
// next one.
func parseLinks(values []string) []link {
	var links []link
	for _, v := range values {
		for len(v) > 0 {
			var l link
			var ok bool
			l, v, ok = parseLinkValue(v)
			if ok {
				links = append(links, l)
			}
		}
	}
	return links
}

// parseLinkValue parses one link-value from the start of s and returns the rest
// after its comma.
func parseLinkValue(s string) (link, string, bool) {
	s = strings.TrimLeft(s, " \t,")
	if s == "" {
		return link{}, "", false
	}
	if s[0] != '<' {
		return link{}, skipLinkValue(s), false
	}
	end := strings.IndexByte(s, '>')
	if end < 0 {
		return link{}, "", false
	}
	l := link{uri: strings.TrimSpace(s[1:end])}
	s = s[end+1:]
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" || s[0] == ',' {
			break
		}
		if s[0] != ';' {
			return link{}, skipLinkValue(s), false
		}
		var name, value string
		name, value, s = parseLinkParam(s[1:])
		if name == "rel" && l.rels == nil {
			l.rels = strings.Fields(strings.ToLower(value))
		}
	}
	return l, s, l.uri != "" && !strings.ContainsAny(l.uri, "<> \t")
}

// parseLinkParam parses `name[=value]` after a semicolon, where value is a
// token or a quoted-string, and returns the rest.
func parseLinkParam(s string) (name, value, rest string) {
	s = strings.TrimLeft(s, " \t")
	i := strings.IndexAny(s, "=;,")
	if i < 0 {
		return strings.ToLower(strings.TrimSpace(s)), "", ""
	}
	name = strings.ToLower(strings.TrimSpace(s[:i]))
	if s[i] != '=' {
		return name, "", s[i:]
	}
	s = strings.TrimLeft(s[i+1:], " \t")
	if strings.HasPrefix(s, `"`) {
		var b strings.Builder
		for j := 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				if j+1 < len(s) {
					j++
					b.WriteByte(s[j])
				}
			case '"':
				return name, b.String(), s[j+1:]
			default:
				b.WriteByte(s[j])
			}
		}
		return name, b.String(), ""
	}
	j := strings.IndexAny(s, ";,")
	if j < 0 {
		return name, strings.TrimSpace(s), ""
	}
	return name, strings.TrimSpace(s[:j]), s[j:]
}

// skipLinkValue returns s after the next comma outside angle brackets and
// quoted strings.
func skipLinkValue(s string) string {
	inQuote, inURI := false, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"' && !inURI:
			inQuote = !inQuote
		case c == '<' && !inQuote:
			inURI = true
		case c == '>' && !inQuote:
			inURI = false
		case c == ',' && !inQuote && !inURI:
			return s[i+1:]
		}
	}
	return ""
}
