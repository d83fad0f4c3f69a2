package fingerprint

// The canonical JSON of internal/jcs as it was before the one-pass
// fingerprint (2026-12-07), kept verbatim but for its package-level names,
// which carry the prefix rj: the reference that ref_test.go computes
// fingerprints with, so that the faster code is held to the bytes, the
// errors and the offsets that stores and clients have seen.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// internal/jcs/jcs.go

// MaxDepth is the deepest nesting of arrays and objects that [Canonicalize]
// and [Members] accept; a top-level object or array is at depth 1. Deeper
// input fails with [ErrTooDeep].
const rjMaxDepth = 256

// Member is one member of a JSON object in canonical form.
type rjMember struct {
	// Name is the member name, unescaped.
	Name string
	// Value is the canonical form of the member's value.
	Value []byte
}

// Options change the canonical form. The zero value is RFC 8785.
type rjOptions struct {
	// ExactNumbers keeps every number's value: a number that a double
	// cannot hold exactly enough to write it back the way RFC 8785 would
	// (9007199254740993, 0.1000000000000000055511151231257827, 1e-400) is
	// written as its exact decimal value instead, digits and a power of
	// ten (9007199254740993, 1000000000000000055511151231257827e-34,
	// 1e-400), so that two numbers of different value never share a
	// canonical form. Every other number is written as RFC 8785 writes it.
	// No number written in exact form is the RFC 8785 form of any other
	// number. The result is not RFC 8785 output when such a number occurs.
	ExactNumbers bool
}

// Canonicalize is [Canonicalize] with the options o.
func (o rjOptions) Canonicalize(src []byte) ([]byte, error) {
	p := rjNewParser(src)
	p.exact = o.ExactNumbers
	defer p.release()
	out, err := p.document(make([]byte, 0, len(src)))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Members is [Members] with the options o.
func (o rjOptions) Members(src []byte) ([]rjMember, error) {
	p := rjNewParser(src)
	p.exact = o.ExactNumbers
	defer p.release()
	p.keepTop = true
	out, err := p.document(make([]byte, 0, len(src)))
	if err != nil {
		return nil, err
	}
	if !p.topIsObject {
		return nil, errRjNotObject
	}
	members := make([]rjMember, len(p.top))
	for i, m := range p.top {
		members[i] = rjMember{
			Name:  string(p.nameOf(m.name)),
			Value: out[m.valueStart:m.end:m.end],
		}
	}
	return members, nil
}

// MemberSpan locates one member of a top-level object in a canonical text
// that [Options.Append] wrote.
type rjMemberSpan struct {
	// Name is the member name, unescaped. It may share memory with the
	// input.
	Name []byte
	// Start, ValueStart and End are offsets into the canonical text: the
	// member's "name":value text spans [Start, End), its value
	// [ValueStart, End).
	Start, ValueStart, End int
}

// Canonical is the canonical form of a JSON text, as [Options.Append]
// returns it.
type rjCanonical struct {
	// Text is the buffer given to Append with the canonical form, what
	// [Options.Canonicalize] returns, appended.
	Text []byte
	// IsObject reports whether the text is a JSON object.
	IsObject bool
	// Members are the members of a top-level object in canonical order,
	// appended to the slice given to Append, with offsets into Text. Nil
	// when the text is not an object.
	Members []rjMemberSpan
}

// Append is [Options.Canonicalize] and [Options.Members] in one pass, for
// callers that reuse their buffers: it appends the canonical form of src to
// dst and, when src is an object, the spans of its members to members. It
// fails with the errors of Canonicalize.
func (o rjOptions) Append(dst, src []byte, members []rjMemberSpan) (rjCanonical, error) {
	p := rjNewParser(src)
	p.exact = o.ExactNumbers
	defer p.release()
	p.keepTop = true
	out, err := p.document(dst)
	if err != nil {
		return rjCanonical{}, err
	}
	c := rjCanonical{Text: out, IsObject: p.topIsObject}
	if c.IsObject {
		c.Members = members
		for _, m := range p.top {
			name := p.nameOf(m.name)
			if m.name.escaped {
				name = bytes.Clone(name) // the parser's buffer goes back to the pool
			}
			c.Members = append(c.Members, rjMemberSpan{Name: name, Start: m.start, ValueStart: m.valueStart, End: m.end})
		}
	}
	return c, nil
}

// internal/jcs/errors.go

// Sentinel errors. Every error returned by this package matches one of them
// with [errors.Is].
var (
	// ErrSyntax reports input that is not well-formed JSON text. It is
	// wrapped by [*SyntaxError], which gives the offset.
	errRjSyntax = errors.New("jcs: syntax error")

	// ErrDuplicateMember reports an object with two members of the same name.
	// It is wrapped by [*DuplicateMemberError], which gives the member.
	errRjDuplicateMember = errors.New("jcs: duplicate object member")

	// ErrNotObject reports that [Members] was given a JSON value that is not
	// an object.
	errRjNotObject = errors.New("jcs: value is not an object")

	// ErrTooDeep reports arrays and objects nested more than [MaxDepth]
	// levels.
	errRjTooDeep = errors.New("jcs: nesting too deep")

	// ErrNumber reports a number that cannot be represented as a finite IEEE
	// 754 double, such as 1e400.
	errRjNumber = errors.New("jcs: number out of range")
)

// SyntaxError describes malformed input: invalid JSON grammar, data after the
// top-level value, bytes that are not valid UTF-8, or a \u escape encoding a
// lone surrogate.
type rjSyntaxError struct {
	// Offset is the zero-based byte offset in the input at which the problem
	// was detected; it equals the input length when the input ended early.
	Offset int64
	// Msg describes the problem.
	Msg string
}

// Error implements the error interface.
func (e *rjSyntaxError) Error() string {
	return fmt.Sprintf("jcs: syntax error at offset %d: %s", e.Offset, e.Msg)
}

// Unwrap returns [ErrSyntax].
func (e *rjSyntaxError) Unwrap() error { return errRjSyntax }

// DuplicateMemberError reports an object member whose name, after unescaping,
// equals the name of another member of the same object.
type rjDuplicateMemberError struct {
	// Pointer is the RFC 6901 JSON pointer of the duplicated member, such as
	// "/customer" or "/items/0/sku".
	Pointer string
}

// Error implements the error interface.
func (e *rjDuplicateMemberError) Error() string {
	return fmt.Sprintf("jcs: duplicate object member %q", e.Pointer)
}

// Unwrap returns [ErrDuplicateMember].
func (e *rjDuplicateMemberError) Unwrap() error { return errRjDuplicateMember }

// internal/jcs/object.go

// member is one member of an object being read. Offsets are into the output
// buffer: the member's `"name":value` text spans [start, end), its value
// [valueStart, end).
type rjEntry struct {
	name                   rjNameRef
	start, valueStart, end int
}

// nameRef locates a member name: in the input, or, when it has escapes,
// unescaped in the parser's names. It holds no pointer, so that moving
// members and path elements around needs no write barriers.
type rjNameRef struct {
	start, end int
	escaped    bool
}

// nameOf returns the unescaped member name r locates.
func (p *rjParser) nameOf(r rjNameRef) []byte {
	if r.escaped {
		return p.names[r.start:r.end]
	}
	return p.src[r.start:r.end]
}

func (p *rjParser) object(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	top := p.depth == 1
	p.pos++ // '{'
	base := len(dst)
	dst = append(dst, '{')
	mark := len(p.members)
	sorted := true // the members read so far are in canonical order
	p.path = append(p.path, rjPathElem{})
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
	} else {
		for {
			if p.pos >= len(p.src) || p.src[p.pos] != '"' {
				return nil, p.syntaxError("expected string for object member name")
			}
			raw, escaped, err := p.scanString()
			if err != nil {
				return nil, err
			}
			// raw starts one byte after the opening quote.
			rawStart := p.pos - len(raw) - 1
			m := rjEntry{name: rjNameRef{start: rawStart, end: p.pos - 1}, start: len(dst)}
			if escaped {
				names, err := p.unescape(p.names, raw, rawStart)
				if err != nil {
					return nil, err
				}
				m.name = rjNameRef{start: len(p.names), end: len(names), escaped: true}
				p.names = names
				dst = rjAppendQuoted(dst, p.nameOf(m.name))
			} else {
				dst = append(dst, '"')
				dst = append(dst, raw...)
				dst = append(dst, '"')
			}
			p.skipSpace()
			if p.pos >= len(p.src) || p.src[p.pos] != ':' {
				return nil, p.syntaxError("expected ':' after object member name")
			}
			p.pos++
			dst = append(dst, ':')
			p.skipSpace()
			m.valueStart = len(dst)
			p.path[len(p.path)-1] = rjPathElem{name: m.name}
			if dst, err = p.value(dst); err != nil {
				return nil, err
			}
			m.end = len(dst)
			if len(p.members) > mark && p.compareNames(p.members[len(p.members)-1].name, m.name) > 0 {
				sorted = false
			}
			p.members = append(p.members, m)
			p.skipSpace()
			if p.pos >= len(p.src) {
				return nil, p.syntaxError("unexpected end of input in object")
			}
			if p.src[p.pos] == '}' {
				p.pos++
				break
			}
			if p.src[p.pos] != ',' {
				return nil, p.syntaxError("expected ',' or '}' after object member")
			}
			p.pos++
			dst = append(dst, ',')
			p.skipSpace()
		}
	}
	dst = append(dst, '}')

	ms := p.members[mark:]
	if !sorted {
		p.sortMembers(ms)
		dst = p.rewrite(dst, base, ms)
	}
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(p.nameOf(ms[i-1].name), p.nameOf(ms[i].name)) {
			p.path[len(p.path)-1] = rjPathElem{name: ms[i].name}
			return nil, &rjDuplicateMemberError{Pointer: p.pointer()}
		}
	}
	if top && p.keepTop {
		p.topIsObject = true
		// The entries stay in place: nothing is read after this object.
		p.top = ms
	}
	p.members = p.members[:mark]
	p.path = p.path[:len(p.path)-1]
	p.depth--
	return dst, nil
}

// sortMembers sorts ms into canonical order: by insertion when they are
// few, as in most objects.
func (p *rjParser) sortMembers(ms []rjEntry) {
	if len(ms) > 12 {
		slices.SortFunc(ms, func(a, b rjEntry) int { return p.compareNames(a.name, b.name) })
		return
	}
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && p.compareNames(ms[j-1].name, ms[j].name) > 0; j-- {
			ms[j-1], ms[j] = ms[j], ms[j-1]
		}
	}
}

// compareNames orders member names by their UTF-16 code units.
func (p *rjParser) compareNames(a, b rjNameRef) int {
	return rjCompareUTF16(p.nameOf(a), p.nameOf(b))
}

// rewrite rewrites the object that starts at dst[base] with its members in
// the order of ms, which holds their offsets in the current output, and
// updates those offsets.
func (p *rjParser) rewrite(dst []byte, base int, ms []rjEntry) []byte {
	p.reorder = append(p.reorder[:0], dst[base:]...)
	old := p.reorder
	dst = append(dst[:base], '{')
	for i := range ms {
		if i > 0 {
			dst = append(dst, ',')
		}
		m := &ms[i]
		start := len(dst)
		dst = append(dst, old[m.start-base:m.end-base]...)
		m.valueStart += start - m.start
		m.start = start
		m.end = len(dst)
	}
	return append(dst, '}')
}

// array reads the array at p.pos and appends its canonical form to dst.
func (p *rjParser) array(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '['
	dst = append(dst, '[')
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == ']' {
		p.pos++
		p.depth--
		return append(dst, ']'), nil
	}
	p.path = append(p.path, rjPathElem{isIndex: true})
	for i := 0; ; i++ {
		p.path[len(p.path)-1].index = i
		var err error
		if dst, err = p.value(dst); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.src) {
			return nil, p.syntaxError("unexpected end of input in array")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		if p.src[p.pos] != ',' {
			return nil, p.syntaxError("expected ',' or ']' after array element")
		}
		p.pos++
		dst = append(dst, ',')
		p.skipSpace()
	}
	p.path = p.path[:len(p.path)-1]
	p.depth--
	return append(dst, ']'), nil
}

// internal/jcs/parser.go

// parser is a recursive-descent JSON parser that appends the canonical form
// of what it reads to a buffer.
type rjParser struct {
	src []byte
	pos int

	// depth is the number of arrays and objects open at pos.
	depth int
	// path locates the value being read, for duplicate member errors.
	path []rjPathElem
	// members is a stack of the members of the objects open at pos; each
	// object uses the entries above the mark it took when it opened.
	members []rjEntry
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
	top         []rjEntry
}

// Limits on the buffers a parser keeps for reuse, so that one huge input
// does not pin memory.
const (
	rjMaxPooledBytes   = 64 << 10
	rjMaxPooledMembers = 1024
)

// parserPool holds parsers whose buffers can be reused.
var rjParserPool = sync.Pool{New: func() any { return new(rjParser) }}

// newParser returns a parser, from the pool when possible, ready to read src.
func rjNewParser(src []byte) *rjParser {
	p := rjParserPool.Get().(*rjParser)
	p.src = src
	return p
}

// release returns p to the pool, keeping its buffers unless they are large
// and dropping every reference into the input.
func (p *rjParser) release() {
	path, members, scratch, reorder, names := p.path, p.members, p.scratch, p.reorder, p.names
	if cap(members) > rjMaxPooledMembers {
		members = nil
	}
	if cap(scratch) > rjMaxPooledBytes {
		scratch = nil
	}
	if cap(names) > rjMaxPooledBytes {
		names = nil
	}
	if cap(reorder) > rjMaxPooledBytes {
		reorder = nil
	}
	*p = rjParser{path: path[:0], members: members[:0], scratch: scratch[:0], reorder: reorder[:0], names: names[:0]}
	rjParserPool.Put(p)
}

// pathElem is one step of a JSON pointer: a member name, or an array index
// when isIndex is set.
type rjPathElem struct {
	name    rjNameRef
	index   int
	isIndex bool
}

// document reads the whole input as one JSON value and appends its canonical
// form to dst.
func (p *rjParser) document(dst []byte) ([]byte, error) {
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
func (p *rjParser) value(dst []byte) ([]byte, error) {
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
	case c == '-' || rjIsDigit(c):
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
func (p *rjParser) stringValue(dst []byte) ([]byte, error) {
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
	return rjAppendQuoted(dst, p.scratch), nil
}

// literal reads the literal word at p.pos and appends it to dst.
func (p *rjParser) literal(dst []byte, word string) ([]byte, error) {
	if !bytes.HasPrefix(p.src[p.pos:], []byte(word)) {
		return nil, p.syntaxError("invalid literal, want " + word)
	}
	p.pos += len(word)
	return append(dst, word...), nil
}

// enter records that an array or object opens at p.pos.
func (p *rjParser) enter() error {
	if p.depth >= rjMaxDepth {
		return fmt.Errorf("%w: more than %d levels at offset %d", errRjTooDeep, rjMaxDepth, p.pos)
	}
	p.depth++
	return nil
}

// skipSpace advances p.pos past JSON whitespace.
func (p *rjParser) skipSpace() {
	src, i := p.src, p.pos
	for i < len(src) && src[i] <= ' ' && (src[i] == ' ' || src[i] == '\n' || src[i] == '\t' || src[i] == '\r') {
		i++
	}
	p.pos = i
}

// pointer returns the RFC 6901 JSON pointer of p.path.
func (p *rjParser) pointer() string {
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
func (p *rjParser) syntaxError(msg string) error { return p.syntaxErrorAt(p.pos, msg) }

// syntaxErrorAt returns a *SyntaxError at offset off.
func (p *rjParser) syntaxErrorAt(off int, msg string) error {
	if off > len(p.src) {
		off = len(p.src)
	}
	return &rjSyntaxError{Offset: int64(off), Msg: msg}
}

// internal/jcs/string.go

// hexDigits are the lowercase hexadecimal digits RFC 8785 requires in \u
// escapes.
const rjHexDigits = "0123456789abcdef"

// scanString reads the JSON string whose opening quote is at p.pos and leaves
// p.pos after the closing quote. It returns the raw text between the quotes
// and whether that text contains escapes; when it does not, the raw text is
// also the unescaped value and, quoted, its canonical form.
func (p *rjParser) scanString() (raw []byte, escaped bool, err error) {
	src := p.src
	start := p.pos + 1
	i := start
	for {
		// Most strings are printable ASCII throughout: skip it a byte at a
		// time with one table lookup each.
		for i < len(src) && rjPlainASCII[src[i]] {
			i++
		}
		if i >= len(src) {
			break
		}
		switch c := src[i]; {
		case c == '"':
			p.pos = i + 1
			return src[start:i], escaped, nil
		case c == '\\':
			escaped = true
			if i+1 < len(src) && !rjIsEscape(src[i+1]) {
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
var rjPlainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// unescape appends the value of the escaped string text raw, which starts at
// offset base of the input, to dst. raw must come from scanString, so it is
// valid UTF-8 without raw control characters.
func (p *rjParser) unescape(dst, raw []byte, base int) ([]byte, error) {
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
			r, ok := rjHex4(raw[i+2:])
			if !ok {
				return nil, p.syntaxErrorAt(base+i, "invalid \\u escape")
			}
			switch {
			case r >= 0xD800 && r < 0xDC00:
				lo, ok := rjHex4(raw[min(i+8, len(raw)):])
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
func rjIsEscape(c byte) bool {
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't', 'u':
		return true
	}
	return false
}

// hex4 decodes the four hexadecimal digits at the start of b.
func rjHex4(b []byte) (rune, bool) {
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
func rjAppendQuoted(dst, s []byte) []byte {
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
			dst = append(dst, '\\', 'u', '0', '0', rjHexDigits[c>>4], rjHexDigits[c&0xF])
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// compareUTF16 compares the valid UTF-8 strings a and b by their UTF-16 code
// units, the member order of RFC 8785 section 3.2.3. It returns a negative
// number when a sorts first, zero when they are equal and a positive number
// when b sorts first.
func rjCompareUTF16(a, b []byte) int {
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
	return int(rjUTF16Key(ra)) - int(rjUTF16Key(rb))
}

// utf16Key maps r to a value whose order is the order of the UTF-16 encoding
// of r. Code points above U+FFFF are encoded as surrogate pairs whose first
// unit lies in D800-DBFF, below the BMP characters E000-FFFF; keeping the
// supplementary code point order among themselves and placing all of them
// between D7FF and E000 gives that order. Valid UTF-8 has no surrogates.
func rjUTF16Key(r rune) rune {
	switch {
	case r >= 0x10000:
		return 0xD800 + (r - 0x10000)
	case r >= 0xE000:
		return r + 0x100000
	default:
		return r
	}
}

// internal/jcs/number.go

// maxExactDigits is the number of digits below which every integer is exact
// in a double (10^15 < 2^53), so its JSON text is already canonical.
const rjMaxExactDigits = 15

// number reads the JSON number at p.pos and appends its canonical form to dst.
func (p *rjParser) number(dst []byte) ([]byte, error) {
	src := p.src
	start := p.pos
	i := start
	if src[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i < len(src) && src[i] == '0':
		i++
	case i < len(src) && rjIsDigit(src[i]):
		for i < len(src) && rjIsDigit(src[i]) {
			i++
		}
	default:
		return nil, p.syntaxErrorAt(i, "invalid number: missing digits")
	}
	intDigits := i - intStart
	plain := true
	fracDigits := 0
	if i < len(src) && src[i] == '.' {
		plain = false
		i++
		if i >= len(src) || !rjIsDigit(src[i]) {
			return nil, p.syntaxErrorAt(i, "invalid number: missing digits after decimal point")
		}
		for i < len(src) && rjIsDigit(src[i]) {
			i++
		}
		fracDigits = i - intStart - intDigits - 1
	}
	exponent := i < len(src) && (src[i] == 'e' || src[i] == 'E')
	if exponent {
		plain = false
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i >= len(src) || !rjIsDigit(src[i]) {
			return nil, p.syntaxErrorAt(i, "invalid number: missing digits in exponent")
		}
		for i < len(src) && rjIsDigit(src[i]) {
			i++
		}
	}
	p.pos = i
	text := src[start:i]

	if plain && intDigits <= rjMaxExactDigits {
		// A short integer is exact and has no leading zeros (the grammar
		// forbids them), so it is its own canonical form, except -0.
		if text[0] == '-' && text[1] == '0' {
			return append(dst, '0'), nil
		}
		return append(dst, text...), nil
	}
	if fracDigits > 0 && !exponent && src[intStart] != '0' && src[i-1] != '0' && intDigits+fracDigits <= rjMaxExactDigits {
		// A decimal such as 100.25: no exponent, no leading zero, no
		// trailing zero after the point, and few enough digits that its
		// double is printed back with the same digits. It is its own
		// canonical form, as appendShortDecimal would write it.
		return append(dst, text...), nil
	}
	if out, ok := rjAppendShortDecimal(dst, text); ok {
		return out, nil
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		// The grammar has been checked, so only a range error is possible:
		// the magnitude rounds to infinity. Underflow reads as zero without
		// an error, as in ECMAScript.
		if len(text) > 40 {
			text = text[:40]
		}
		return nil, fmt.Errorf("%w: %s at offset %d", errRjNumber, text, start)
	}
	out := rjAppendNumber(dst, f)
	if !p.exact {
		return out, nil
	}
	// Digits of up to 32 bytes, which every double's shortest form fits in,
	// need no allocation.
	var wantDigits, gotDigits [32]byte
	want, ok := rjParseDecimal(wantDigits[:0], text)
	if !ok {
		return nil, fmt.Errorf("%w: exponent of %.40s at offset %d", errRjNumber, text, start)
	}
	if got, _ := rjParseDecimal(gotDigits[:0], out[len(dst):]); got.equal(want) {
		return out, nil
	}
	return want.appendTo(dst), nil
}

// decimal is the exact value of a decimal number: digits × 10^exp, with no
// leading or trailing zeros in digits; zero has no digits.
type rjDecimal struct {
	neg    bool
	digits []byte
	exp    int64
}

// maxExponentDigits bounds the exponent of a number read exactly; a longer
// one is out of any useful range.
const rjMaxExponentDigits = 15

// parseDecimal reads the exact value of s, which has the JSON number
// grammar, with its digits appended to buf. ok is false when the exponent
// has more than maxExponentDigits digits.
func rjParseDecimal(buf, s []byte) (d rjDecimal, ok bool) {
	i := 0
	if s[i] == '-' {
		d.neg = true
		i++
	}
	digits := buf
	var fraction int64
	for ; i < len(s) && rjIsDigit(s[i]); i++ {
		digits = append(digits, s[i])
	}
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && rjIsDigit(s[i]); i++ {
			digits = append(digits, s[i])
			fraction++
		}
	}
	var exp int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		expNeg := false
		if s[i] == '+' || s[i] == '-' {
			expNeg = s[i] == '-'
			i++
		}
		for i < len(s) && s[i] == '0' {
			i++
		}
		if len(s)-i > rjMaxExponentDigits {
			return rjDecimal{}, false
		}
		for ; i < len(s); i++ {
			exp = exp*10 + int64(s[i]-'0')
		}
		if expNeg {
			exp = -exp
		}
	}
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return rjDecimal{}, true // zero, of either sign
	}
	exp -= fraction
	for digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	d.digits, d.exp = digits, exp
	return d, true
}

func (d rjDecimal) equal(o rjDecimal) bool {
	return d.neg == o.neg && d.exp == o.exp && bytes.Equal(d.digits, o.digits)
}

// appendTo writes d as digits and, unless it is zero, the power of ten:
// 1234e-2, 5e20, 17.
func (d rjDecimal) appendTo(dst []byte) []byte {
	if len(d.digits) == 0 {
		return append(dst, '0')
	}
	if d.neg {
		dst = append(dst, '-')
	}
	dst = append(dst, d.digits...)
	if d.exp != 0 {
		dst = append(dst, 'e')
		dst = strconv.AppendInt(dst, d.exp, 10)
	}
	return dst
}

func rjIsDigit(c byte) bool { return c >= '0' && c <= '9' }

// appendNumber appends the finite double f to dst as ECMAScript's
// Number.prototype.toString writes it (ECMA-262 Number::toString, which RFC
// 8785 section 3.2.2.3 adopts).
func rjAppendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		// Both +0 and -0.
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}

	// strconv's shortest form gives the digits s (k of them) and the exponent
	// of the first digit; ECMAScript calls n the position of the decimal point
	// relative to the first digit, so that f = s × 10^(n−k).
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±xx
	var digitBuf [24]byte
	digits := append(digitBuf[:0], b[0])
	i := 1
	if b[i] == '.' {
		for i++; b[i] != 'e'; i++ {
			digits = append(digits, b[i])
		}
	}
	i++ // 'e'
	expNeg := b[i] == '-'
	exp := 0
	for i++; i < len(b); i++ {
		exp = exp*10 + int(b[i]-'0')
	}
	if expNeg {
		exp = -exp
	}
	return rjAppendDigits(dst, digits, exp+1)
}

// appendDigits appends, as ECMAScript's Number::toString writes it, the
// positive number whose shortest decimal digits are digits, with n of them
// before the decimal point: digits × 10^(n−len(digits)).
func rjAppendDigits(dst, digits []byte, n int) []byte {
	k := len(digits)

	switch {
	case k <= n && n <= 21:
		// An integer: the digits followed by n−k zeros.
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		// A decimal point inside the digits.
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		// A small fraction: "0." and −n zeros before the digits.
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		// Exponent form: d[.ddd]e±x.
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 < 0 {
			dst = append(dst, '-')
		} else {
			dst = append(dst, '+')
		}
		e := n - 1
		if e < 0 {
			e = -e
		}
		dst = strconv.AppendInt(dst, int64(e), 10)
	}
	return dst
}

// appendShortDecimal appends the canonical form of text, a JSON number,
// without converting it to a double and back, when that cannot change its
// digits: text has no exponent, at most maxExactDigits significant digits
// (every such decimal is the shortest form of the double nearest to it,
// which a double's 53 bits can tell from every other), and a magnitude
// that is written without an exponent (1e-6 <= |v| < 1e21). Such a number
// is exact, and so is its own exact form. It reports false for any other
// number.
func rjAppendShortDecimal(dst, text []byte) ([]byte, bool) {
	var buf [rjMaxExactDigits]byte
	digits := buf[:0]
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	n := 0         // digits before the point, counted from the first significant one
	point := false // the point has been read
	zeros := 0     // zeros read since the last significant digit
	for _, c := range text {
		switch {
		case c == '.':
			point = true
		case c == 'e' || c == 'E':
			return nil, false
		case c == '0' && len(digits) == 0:
			if point {
				n-- // a leading zero after the point
			}
		case c == '0':
			zeros++
			if !point {
				n++
			}
		default:
			if len(digits)+zeros+1 > rjMaxExactDigits {
				return nil, false
			}
			for ; zeros > 0; zeros-- {
				digits = append(digits, '0')
			}
			digits = append(digits, c)
			if !point {
				n++
			}
		}
	}
	if len(digits) == 0 {
		return append(dst, '0'), true // zero, of either sign
	}
	if n <= -6 || n > 21 {
		return nil, false
	}
	if neg {
		dst = append(dst, '-')
	}
	return rjAppendDigits(dst, digits, n), true
}
