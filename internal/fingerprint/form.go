package fingerprint

import (
	"bytes"
	"errors"
	"net/url"
	"slices"
	"strings"
)

// maxSplitPairs is the number of pairs up to which canonicalPairs splits a
// form or query itself; it hands longer ones to url.ParseQuery, whose limit
// on the number of pairs then applies.
const maxSplitPairs = 64

// canonicalPairs parses URL-encoded pairs as url.ParseQuery does, and
// appends them to dst with names sorted and, for each name, its values in
// the order they came, escaped as url.QueryEscape escapes them: the order
// of distinct names carries no meaning, that of a name's values does
// (dest=A&amount=100&dest=B&amount=1 pairs each amount with a dest).
// Pairs whose names are all distinct encode as they did when values were
// sorted too, and so do repeated values that came sorted. With digests, it also leaves
// in s the digests of the fields, one for each name that is not excluded
// (see scratch.digests); excluded names are left out of the encoding too.
func canonicalPairs[T string | []byte](s *scratch, dst []byte, raw T, exclude []string, digests bool) ([]byte, error) {
	if digests {
		s.hasFields = true
	}
	if len(raw) == 0 {
		return dst, nil
	}
	s.pairs, s.pointers, s.ends = s.pairs[:0], s.pointers[:0], s.ends[:0]
	// Unescaped text is never longer than the escaped, so that the pairs
	// can point into this buffer while it is filled.
	s.unescaped = slices.Grow(s.unescaped[:0], len(raw))
	var err error
	if countByte(raw, '&') < maxSplitPairs {
		err = splitPairs(s, raw, exclude)
	} else {
		err = s.parsePairs(string(raw), exclude)
	}
	if err != nil {
		return dst, err
	}
	pairs := s.pairs
	slices.SortStableFunc(pairs, func(a, b formPair) int { return bytes.Compare(a.name, b.name) })
	start := len(dst)
	for i := 0; i < len(pairs); {
		name := pairs[i].name
		values := s.value[:0]
		for ; i < len(pairs) && bytes.Equal(pairs[i].name, name); i++ {
			if len(dst) > start {
				dst = append(dst, '&')
			}
			dst = append(appendQueryEscape(dst, name), '=')
			valueStart := len(dst)
			if pairs[i].escaped {
				dst = append(dst, pairs[i].value...)
			} else {
				dst = appendQueryEscape(dst, pairs[i].value)
			}
			values = append(append(values, dst[valueStart:]...), '&')
		}
		s.value = values
		if digests {
			s.digestField(addPointer(s, name), values)
		}
	}
	return dst, nil
}

// splitPairs reads the pairs of raw into s.pairs, leaving out excluded
// names, as url.ParseQuery reads them.
func splitPairs[T string | []byte](s *scratch, raw T, exclude []string) error {
	for len(raw) > 0 {
		pair := raw
		if i := indexByte(raw, '&'); i >= 0 {
			pair, raw = raw[:i], raw[i+1:]
		} else {
			raw = raw[len(raw):]
		}
		if indexByte(pair, ';') >= 0 {
			return errors.New("invalid semicolon separator in query")
		}
		if len(pair) == 0 {
			continue
		}
		name, value := pair, pair[len(pair):]
		if i := indexByte(pair, '='); i >= 0 {
			name, value = pair[:i], pair[i+1:]
		}
		start := len(s.unescaped)
		var ok bool
		if s.unescaped, ok = appendQueryUnescape(s.unescaped, name); !ok {
			return errors.New("invalid URL escape")
		}
		middle := len(s.unescaped)
		escaped := queryEscaped(value)
		if escaped {
			// Most values: no need to unescape what is escaped again.
			s.unescaped = append(s.unescaped, value...)
		} else if s.unescaped, ok = appendQueryUnescape(s.unescaped, value); !ok {
			return errors.New("invalid URL escape")
		}
		if p := (formPair{s.unescaped[start:middle], s.unescaped[middle:], escaped}); !excludedName(exclude, p.name) {
			s.pairs = append(s.pairs, p)
		}
	}
	return nil
}

// parsePairs reads the pairs of raw into s.pairs with url.ParseQuery,
// leaving out excluded names. The pairs of a name are in the order they
// came, those of distinct names in any order.
func (s *scratch) parsePairs(raw string, exclude []string) error {
	values, err := url.ParseQuery(raw)
	if err != nil {
		return err
	}
	for name, vs := range values {
		if excludedName(exclude, []byte(name)) {
			continue
		}
		for _, v := range vs {
			s.pairs = append(s.pairs, formPair{[]byte(name), []byte(v), false})
		}
	}
	return nil
}

// appendQueryUnescape appends text unescaped as url.QueryUnescape
// unescapes it: "+" is a space and "%" starts two hexadecimal digits. It
// reports false for a "%" without them.
func appendQueryUnescape[T string | []byte](dst []byte, text T) ([]byte, bool) {
	for i := 0; i < len(text); {
		// Copy the bytes that stand for themselves a run at a time.
		j := i
		for j < len(text) && text[j] != '+' && text[j] != '%' {
			j++
		}
		dst = append(dst, text[i:j]...)
		switch {
		case j == len(text):
			return dst, true
		case text[j] == '+':
			dst = append(dst, ' ')
			i = j + 1
		case j+2 >= len(text) || !isHex(text[j+1]) || !isHex(text[j+2]):
			return dst, false
		default:
			dst = append(dst, unhex(text[j+1])<<4|unhex(text[j+2]))
			i = j + 3
		}
	}
	return dst, true
}

// appendQueryEscape appends b escaped as url.QueryEscape escapes it:
// letters, digits and "-_.~" as they are, a space as "+", any other byte
// as "%" and two upper-case hexadecimal digits.
func appendQueryEscape(dst, b []byte) []byte {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(b); {
		// Copy the bytes written as they are a run at a time.
		j := i
		for j < len(b) && queryAsIs[b[j]] {
			j++
		}
		dst = append(dst, b[i:j]...)
		if j == len(b) {
			break
		}
		if c := b[j]; c == ' ' {
			dst = append(dst, '+')
		} else {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&0xF])
		}
		i = j + 1
	}
	return dst
}

// queryEscaped reports whether text is what appendQueryEscape writes for
// what appendQueryUnescape reads in it: bytes of queryAsIs, "+", and "%"
// with two upper-case hexadecimal digits of a byte that is neither of
// queryAsIs nor a space.
func queryEscaped[T string | []byte](text T) bool {
	for i := 0; i < len(text); i++ {
		if c := text[i]; queryAsIs[c] || c == '+' {
			continue
		}
		if text[i] != '%' || i+2 >= len(text) {
			return false
		}
		hi, lo := upperHex(text[i+1]), upperHex(text[i+2])
		if hi < 0 || lo < 0 {
			return false
		}
		if c := byte(hi<<4 | lo); queryAsIs[c] || c == ' ' {
			return false
		}
		i += 2
	}
	return true
}

// upperHex returns the value of the upper-case hexadecimal digit c, or -1.
func upperHex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// queryAsIs marks the bytes that appendQueryEscape writes as they are:
// letters, digits and "-_.~".
var queryAsIs = func() (t [256]bool) {
	for c := range t {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~'
	}
	return t
}()

// indexByte returns the index of the first c in s, or -1, with the
// standard library's vector search.
func indexByte[T string | []byte](s T, c byte) int {
	switch s := any(s).(type) {
	case string:
		return strings.IndexByte(s, c)
	case []byte:
		return bytes.IndexByte(s, c)
	}
	panic("unreachable")
}

// countByte returns the number of c in s, as indexByte searches.
func countByte[T string | []byte](s T, c byte) int {
	switch s := any(s).(type) {
	case string:
		return strings.Count(s, string(c))
	case []byte:
		return bytes.Count(s, []byte{c})
	}
	panic("unreachable")
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// excludedName reports whether the form field name is excluded.
func excludedName(exclude []string, name []byte) bool {
	for _, ptr := range exclude {
		if unescapePointer(ptr) == string(name) {
			return true
		}
	}
	return false
}
