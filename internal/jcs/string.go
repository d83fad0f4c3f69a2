package jcs

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// hexDigits are the lowercase hexadecimal digits RFC 8785 requires in \u
// escapes.
const hexDigits = "0123456789abcdef"

// scanString reads the JSON string whose opening quote is at p.pos and leaves
// p.pos after the closing quote. It returns the raw text between the quotes
// and whether that text contains escapes; when it does not, the raw text is
// also the unescaped value and, quoted, its canonical form.
func (p *parser) scanString() (raw []byte, escaped bool, err error) {
	src := p.src
	start := p.pos + 1
	i := start
	for {
		// Most strings are printable ASCII throughout: skip it eight bytes
		// at a time.
		if i = plainEnd(src, i); i >= len(src) {
			break
		}
		switch c := src[i]; {
		case c == '"':
			p.pos = i + 1
			return src[start:i], escaped, nil
		case c == '\\':
			escaped = true
			if i+1 < len(src) && !isEscape(src[i+1]) {
				return nil, false, p.syntaxErrorAt(i, "invalid escape")
			}
			// Skip the escaped character so that \" does not end the string;
			// unescape checks the digits of \u escapes.
			i += 2
		case c < 0x20:
			return nil, false, p.syntaxErrorAt(i, "control character in string")
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, false, p.syntaxErrorAt(i, "invalid UTF-8 in string")
			}
			i += size
		}
	}
	return nil, false, p.syntaxErrorAt(len(src), "unexpected end of input in string")
}

// plainASCII marks the bytes that stand for themselves in a JSON string:
// printable ASCII (and DEL) other than '"' and '\'.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// unescape appends the value of the escaped string text raw, which starts at
// offset base of the input, to dst. raw must come from scanString, so it is
// valid UTF-8 without raw control characters.
func (p *parser) unescape(dst, raw []byte, base int) ([]byte, error) {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 >= len(raw) {
			return nil, p.syntaxErrorAt(base+i, "invalid escape")
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			dst = append(dst, raw[i+1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw[i+2:])
			if !ok {
				return nil, p.syntaxErrorAt(base+i, "invalid \\u escape")
			}
			switch {
			case r >= 0xD800 && r < 0xDC00:
				lo, ok := hex4(raw[min(i+8, len(raw)):])
				if !ok || raw[i+6] != '\\' || raw[i+7] != 'u' || lo < 0xDC00 || lo >= 0xE000 {
					return nil, p.syntaxErrorAt(base+i, "lone surrogate in \\u escape")
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 6
			case r >= 0xDC00 && r < 0xE000:
				return nil, p.syntaxErrorAt(base+i, "lone surrogate in \\u escape")
			}
			dst = utf8.AppendRune(dst, r)
			i += 4
		default:
			return nil, p.syntaxErrorAt(base+i, "invalid escape")
		}
		i += 2
	}
	return dst, nil
}

// isEscape reports whether \c is one of the escapes of RFC 8259 section 7.
func isEscape(c byte) bool {
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't', 'u':
		return true
	}
	return false
}

// hex4 decodes the four hexadecimal digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendQuoted appends the canonical form of the string s, which must be valid
// UTF-8, to dst: RFC 8785 section 3.2.2.2 escapes only '"', '\' and
// U+0000 to U+001F.
func appendQuoted(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		start = i + 1
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// compareUTF16 compares the valid UTF-8 strings a and b by their UTF-16 code
// units, the member order of RFC 8785 section 3.2.3. It returns a negative
// number when a sorts first, zero when they are equal and a positive number
// when b sorts first.
func compareUTF16(a, b []byte) int {
	// Skip the common prefix; it has the same code units in both.
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	if n == len(a) || n == len(b) {
		return len(a) - len(b)
	}
	if a[n] < utf8.RuneSelf && b[n] < utf8.RuneSelf {
		// ASCII characters are one code unit each.
		return int(a[n]) - int(b[n])
	}
	// Back up to the first byte of the character that differs.
	for n > 0 && !utf8.RuneStart(a[n]) {
		n--
	}
	ra, _ := utf8.DecodeRune(a[n:])
	rb, _ := utf8.DecodeRune(b[n:])
	return int(utf16Key(ra)) - int(utf16Key(rb))
}

// utf16Key maps r to a value whose order is the order of the UTF-16 encoding
// of r. Code points above U+FFFF are encoded as surrogate pairs whose first
// unit lies in D800-DBFF, below the BMP characters E000-FFFF; keeping the
// supplementary code point order among themselves and placing all of them
// between D7FF and E000 gives that order. Valid UTF-8 has no surrogates.
func utf16Key(r rune) rune {
	switch {
	case r >= 0x10000:
		return 0xD800 + (r - 0x10000)
	case r >= 0xE000:
		return r + 0x100000
	default:
		return r
	}
}

// plainEnd returns the offset of the first byte at or after i in src that
// plainASCII does not mark, or len(src): eight bytes at a time while eight
// are left, as a string's text mostly is.
func plainEnd(src []byte, i int) int {
	for ; i+8 <= len(src); i += 8 {
		if m := NotPlain(binary.LittleEndian.Uint64(src[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(src) && plainASCII[src[i]] {
		i++
	}
	return i
}

// PlainByte reports whether a string that [PlainValueEnd] accepts may hold
// c as it is: printable ASCII or DEL, but '"' and '\'.
func PlainByte(c byte) bool { return plainASCII[c] }

// NotPlain returns the eight bytes x, read little-endian, with the high bit
// of the first one that [PlainByte] does not accept set, and no bit of a
// byte before it; 0 when it accepts all eight.
func NotPlain(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	// A byte's high bit is set in m when it is below 0x20, is '"' or '\',
	// or is not ASCII. Each term flags its lowest such byte exactly (a
	// borrow only runs on past a flagged byte), so no byte before the
	// first is flagged.
	m := ((x - ones*0x20) | (x ^ ones*'"' - ones) | (x ^ ones*'\\' - ones)) &^ x
	return (m | x) & highs
}
