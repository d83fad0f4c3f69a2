package jcs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// parser is a recursive-descent JSON parser that appends the canonical form
// of what it reads to a buffer.
type parser struct {
	src []byte
	pos int

	// depth is the number of arrays and objects open at pos.
	depth int
	// path locates the value being read, for duplicate member errors.
	path []pathElem
	// members is a stack of the members of the objects open at pos; each
	// object uses the entries above the mark it took when it opened.
	members []member
	// scratch holds unescaped string values before they are written.
	scratch []byte
	// names holds the unescaped member names that have escapes.
	names []byte
	// reorder holds an object's output while its members are reordered.
	reorder []byte

	// exact is Options.ExactNumbers.
	exact bool

	// keepTop asks document to keep the members of a top-level object in top.
	keepTop     bool
	topIsObject bool
	top         []member
}

// Limits on the buffers a parser keeps for reuse, so that one huge input
// does not pin memory.
const (
	maxPooledBytes   = 64 << 10
	maxPooledMembers = 1024
)

// parserPool holds parsers whose buffers can be reused.
var parserPool = sync.Pool{New: func() any { return new(parser) }}

// newParser returns a parser, from the pool when possible, ready to read src.
func newParser(src []byte) *parser {
	p := parserPool.Get().(*parser)
	p.src = src
	return p
}

// release returns p to the pool, keeping its buffers unless they are large
// and dropping every reference into the input.
func (p *parser) release() {
	path, members, scratch, reorder, names := p.path, p.members, p.scratch, p.reorder, p.names
	if cap(members) > maxPooledMembers {
		members = nil
	}
	if cap(scratch) > maxPooledBytes {
		scratch = nil
	}
	if cap(names) > maxPooledBytes {
		names = nil
	}
	if cap(reorder) > maxPooledBytes {
		reorder = nil
	}
	*p = parser{path: path[:0], members: members[:0], scratch: scratch[:0], reorder: reorder[:0], names: names[:0]}
	parserPool.Put(p)
}

// pathElem is one step of a JSON pointer: a member name, or an array index
// when isIndex is set.
type pathElem struct {
	name    nameRef
	index   int
	isIndex bool
}

// document reads the whole input as one JSON value and appends its canonical
// form to dst.
func (p *parser) document(dst []byte) ([]byte, error) {
	p.skipSpace()
	dst, err := p.value(dst)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.src) {
		return nil, p.syntaxError("invalid character after top-level value")
	}
	return dst, nil
}

// value reads the JSON value at p.pos, which follows any whitespace, and
// appends its canonical form to dst.
func (p *parser) value(dst []byte) ([]byte, error) {
	if p.pos >= len(p.src) {
		return nil, p.syntaxError("unexpected end of input")
	}
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object(dst)
	case c == '[':
		return p.array(dst)
	case c == '"':
		return p.stringValue(dst)
	case c == '-' || isDigit(c):
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

// object reads the object at p.pos and appends its canonical form to dst.

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
		return fmt.Errorf("%w: more than %d levels at offset %d", ErrTooDeep, MaxDepth, p.pos)
	}
	p.depth++
	return nil
}

// skipSpace advances p.pos past JSON whitespace.
func (p *parser) skipSpace() {
	src, i := p.src, p.pos
	for i < len(src) && src[i] <= ' ' && (src[i] == ' ' || src[i] == '\n' || src[i] == '\t' || src[i] == '\r') {
		i++
	}
	p.pos = i
}

// pointer returns the RFC 6901 JSON pointer of p.path.
func (p *parser) pointer() string {
	var b strings.Builder
	for _, e := range p.path {
		b.WriteByte('/')
		if e.isIndex {
			b.WriteString(strconv.Itoa(e.index))
			continue
		}
		for _, c := range p.nameOf(e.name) {
			switch c {
			case '~':
				b.WriteString("~0")
			case '/':
				b.WriteString("~1")
			default:
				b.WriteByte(c)
			}
		}
	}
	return b.String()
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
