package jcs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
)

// parser is a recursive-descent JSON parser that appends the canonical form
// of what it reads to a buffer, in one pass over its input.
type parser struct {
	src []byte
	pos int

	// depth is the number of arrays and objects open at pos.
	depth int
	// members is a stack of the members of the objects open at pos; each
	// object uses the entries above the mark it took when it opened. The
	// top-level object's stay when it closes.
	members []member
	// scratch holds unescaped string values before they are written.
	scratch []byte
	// names holds the unescaped member names that have escapes. It only
	// grows while a text is read, so that a name in it stays where it is.
	names []byte
	// reorder holds an object's output while its members are reordered.
	reorder []byte

	// exact is Options.ExactNumbers.
	exact bool

	// topIsObject reports that the text is an object, whose members are
	// left in members.
	topIsObject bool
}

// document reads the whole input as one JSON value and appends its canonical
// form to dst.
func (p *parser) document(dst []byte) ([]byte, error) {
	p.pos = skipSpace(p.src, p.pos)
	dst, err := p.value(dst)
	if err != nil {
		return nil, err
	}
	p.pos = skipSpace(p.src, p.pos)
	if p.pos < len(p.src) {
		return nil, p.syntaxError("invalid character after top-level value")
	}
	return dst, nil
}

// value reads the JSON value at p.pos, which follows any whitespace, and
// appends its canonical form to dst.
func (p *parser) value(dst []byte) ([]byte, error) {
	src, i := p.src, p.pos
	if i >= len(src) {
		return nil, p.syntaxError("unexpected end of input")
	}
	switch c := src[i]; {
	case c == '"':
		// Most strings are printable ASCII without escapes, and are their
		// own canonical form.
		j := plainEnd(src, i+1)
		if j < len(src) && src[j] == '"' {
			p.pos = j + 1
			return append(dst, src[i:j+1]...), nil
		}
		return p.stringValue(dst)
	case c == '{':
		return p.object(dst)
	case c == '[':
		return p.array(dst)
	case c >= '1' && c <= '9':
		// An integer of up to maxExactDigits digits, as most numbers
		// are, is its own canonical form (see number).
		j := i + 1
		for j < len(src) && isDigit(src[j]) {
			j++
		}
		if j-i <= maxExactDigits && (j == len(src) || src[j] != '.' && src[j] != 'e' && src[j] != 'E') {
			p.pos = j
			return append(dst, src[i:j]...), nil
		}
		return p.number(dst)
	case c == '-' || c == '0':
		return p.number(dst)
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	default:
		return nil, p.syntaxError("invalid character at start of value")
	}
}

// stringValue reads the string value at p.pos and appends its canonical form to
// dst.
func (p *parser) stringValue(dst []byte) ([]byte, error) {
	start := p.pos
	raw, escaped, err := p.scanString()
	if err != nil {
		return nil, err
	}
	if !escaped {
		// Without escapes the text holds no '"', '\' or control characters,
		// so it is already canonical.
		return append(dst, p.src[start:p.pos]...), nil
	}
	p.scratch, err = p.unescape(p.scratch[:0], raw, start+1)
	if err != nil {
		return nil, err
	}
	return appendQuoted(dst, p.scratch), nil
}

// literal reads the literal word at p.pos and appends it to dst.
func (p *parser) literal(dst []byte, word string) ([]byte, error) {
	if !bytes.HasPrefix(p.src[p.pos:], []byte(word)) {
		return nil, p.syntaxError("invalid literal, want " + word)
	}
	p.pos += len(word)
	return append(dst, word...), nil
}

// enter records that an array or object opens at p.pos.
func (p *parser) enter() error {
	if p.depth >= MaxDepth {
		return tooDeep(p.pos)
	}
	p.depth++
	return nil
}

// tooDeep returns the error of an array or object that opens at offset
// pos, beyond MaxDepth.
func tooDeep(pos int) error {
	return fmt.Errorf("%w: more than %d levels at offset %d", ErrTooDeep, MaxDepth, pos)
}

// skipSpace returns the offset of the first byte at or after i in src that
// is not JSON whitespace.
func skipSpace(src []byte, i int) int {
	for i < len(src) && src[i] <= ' ' && (src[i] == ' ' || src[i] == '\n' || src[i] == '\t' || src[i] == '\r') {
		i++
	}
	return i
}

// inMember prefixes the pointer of a duplicate member that err reports, if
// it does, with the step to the member name of the object it is in: the
// parser keeps no path, and builds the pointer on the way out instead.
func inMember(err error, name []byte) error {
	if dup, ok := err.(*DuplicateMemberError); ok {
		dup.Pointer = appendStep(nil, name) + dup.Pointer
	}
	return err
}

// inElement is inMember for the element index of an array.
func inElement(err error, index int) error {
	if dup, ok := err.(*DuplicateMemberError); ok {
		dup.Pointer = "/" + strconv.Itoa(index) + dup.Pointer
	}
	return err
}

// appendStep returns dst and the RFC 6901 step to the member name: "/" and
// the name with "~" written "~0" and "/" written "~1".
func appendStep(dst []byte, name []byte) string {
	dst = append(dst, '/')
	for _, c := range name {
		switch c {
		case '~':
			dst = append(dst, '~', '0')
		case '/':
			dst = append(dst, '~', '1')
		default:
			dst = append(dst, c)
		}
	}
	return string(dst)
}

// syntaxError returns a *SyntaxError at p.pos.
func (p *parser) syntaxError(msg string) error { return p.syntaxErrorAt(p.pos, msg) }

// syntaxErrorAt returns a *SyntaxError at offset off.
func (p *parser) syntaxErrorAt(off int, msg string) error {
	if off > len(p.src) {
		off = len(p.src)
	}
	return &SyntaxError{Offset: int64(off), Msg: msg}
}

// MaxPlainDigits is the most digits of an integer that [PlainValueEnd]
// accepts.
const MaxPlainDigits = maxExactDigits

// PlainValueEnd returns the end of the JSON value that starts at src[i]
// when that value is its own canonical form in the simplest way, as the
// values of most requests are: a string of printable ASCII without
// escapes (see [PlainByte]), an integer of up to [MaxPlainDigits] digits
// without sign, exponent or leading zero, true, false or null. It returns
// -1 for any other value, and for a value that src does not hold to its
// end, which a caller then reads with an [Encoder]. The byte after the
// value is not checked but for a number, whose digits must end there: a
// following '.', 'e', 'E' or digit makes it -1.
func PlainValueEnd(src []byte, i int) int {
	if i < 0 || i >= len(src) {
		return -1
	}
	c := src[i]
	if c == '"' {
		// Strings are copied as they are by parser.value when plainEnd
		// reaches their closing quote. Its first step is taken here,
		// without the call, as it holds most strings whole.
		j := i + 1
		if len(src)-j >= 8 {
			if m := NotPlain(binary.LittleEndian.Uint64(src[j:])); m != 0 {
				if j += bits.TrailingZeros64(m) >> 3; src[j] == '"' {
					return j + 1
				}
				return -1
			}
			j += 8
		}
		if j = plainEnd(src, j); j < len(src) && src[j] == '"' {
			return j + 1
		}
		return -1
	}
	if isDigit(c) {
		// A short integer is its own canonical form (see number), and
		// so is a lone 0.
		j := i + 1
		if c != '0' {
			for j < len(src) && isDigit(src[j]) {
				j++
			}
		}
		if j-i <= maxExactDigits && (j == len(src) || !isDigit(src[j]) && src[j] != '.' && src[j] != 'e' && src[j] != 'E') {
			return j
		}
		return -1
	}
	switch c {
	case 't':
		if len(src)-i >= 4 && string(src[i:i+4]) == "true" {
			return i + 4
		}
	case 'f':
		if len(src)-i >= 5 && string(src[i:i+5]) == "false" {
			return i + 5
		}
	case 'n':
		if len(src)-i >= 4 && string(src[i:i+4]) == "null" {
			return i + 4
		}
	}
	return -1
}
