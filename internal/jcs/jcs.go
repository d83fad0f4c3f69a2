package jcs

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// MaxDepth is the deepest nesting of arrays and objects that [Canonicalize]
// and [Members] accept; a top-level object or array is at depth 1. Deeper
// input fails with [ErrTooDeep].
const MaxDepth = 256

// Member is one member of a JSON object in canonical form.
type Member struct {
	// Name is the member name, unescaped.
	Name string
	// Value is the canonical form of the member's value.
	Value []byte
}

// Options change the canonical form. The zero value is RFC 8785.
type Options struct {
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

// Canonicalize returns the RFC 8785 canonical form of the JSON text src.
//
// It fails with a [*SyntaxError] for malformed input, a [*DuplicateMemberError]
// for an object with two members of the same name, [ErrNumber] for a number
// too large for a double and [ErrTooDeep] for nesting beyond [MaxDepth].
func Canonicalize(src []byte) ([]byte, error) { return Options{}.Canonicalize(src) }

// Members parses src, which must be a JSON object, and returns its members in
// RFC 8785 order (sorted by the UTF-16 code units of their names), each value
// canonicalised.
//
// Joining the members as "name":value pairs, with each name written as a
// canonical string, inside braces gives [Canonicalize] of src. Members fails
// with [ErrNotObject] when src is well-formed JSON of another kind, and
// otherwise with the errors of [Canonicalize].
func Members(src []byte) ([]Member, error) { return Options{}.Members(src) }

// Canonicalize is [Canonicalize] with the options o.
func (o Options) Canonicalize(src []byte) ([]byte, error) {
	p := newParser(src)
	p.exact = o.ExactNumbers
	defer p.release()
	out, err := p.document(make([]byte, 0, len(src)))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Members is [Members] with the options o.
func (o Options) Members(src []byte) ([]Member, error) {
	p := newParser(src)
	p.exact = o.ExactNumbers
	defer p.release()
	p.keepTop = true
	out, err := p.document(make([]byte, 0, len(src)))
	if err != nil {
		return nil, err
	}
	if !p.topIsObject {
		return nil, ErrNotObject
	}
	members := make([]Member, len(p.top))
	for i, m := range p.top {
		members[i] = Member{
			Name:  string(p.nameOf(m.name)),
			Value: out[m.valueStart:m.end:m.end],
		}
	}
	return members, nil
}

// MemberSpan locates one member of a top-level object in a canonical text
// that [Options.Append] wrote.
type MemberSpan struct {
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
type Canonical struct {
	// Text is the buffer given to Append with the canonical form, what
	// [Options.Canonicalize] returns, appended.
	Text []byte
	// IsObject reports whether the text is a JSON object.
	IsObject bool
	// Members are the members of a top-level object in canonical order,
	// appended to the slice given to Append, with offsets into Text. Nil
	// when the text is not an object.
	Members []MemberSpan
}

// Append is [Options.Canonicalize] and [Options.Members] in one pass, for
// callers that reuse their buffers: it appends the canonical form of src to
// dst and, when src is an object, the spans of its members to members. It
// fails with the errors of Canonicalize.
func (o Options) Append(dst, src []byte, members []MemberSpan) (Canonical, error) {
	p := newParser(src)
	p.exact = o.ExactNumbers
	defer p.release()
	p.keepTop = true
	out, err := p.document(dst)
	if err != nil {
		return Canonical{}, err
	}
	c := Canonical{Text: out, IsObject: p.topIsObject}
	if c.IsObject {
		c.Members = members
		for _, m := range p.top {
			name := p.nameOf(m.name)
			if m.name.escaped {
				name = bytes.Clone(name) // the parser's buffer goes back to the pool
			}
			c.Members = append(c.Members, MemberSpan{Name: name, Start: m.start, ValueStart: m.valueStart, End: m.end})
		}
	}
	return c, nil
}

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

// member is one member of an object being read. Offsets are into the output
// buffer: the member's `"name":value` text spans [start, end), its value
// [valueStart, end).
type member struct {
	name                   nameRef
	start, valueStart, end int
}

// nameRef locates a member name: in the input, or, when it has escapes,
// unescaped in the parser's names. It holds no pointer, so that moving
// members and path elements around needs no write barriers.
type nameRef struct {
	start, end int
	escaped    bool
}

// nameOf returns the unescaped member name r locates.
func (p *parser) nameOf(r nameRef) []byte {
	if r.escaped {
		return p.names[r.start:r.end]
	}
	return p.src[r.start:r.end]
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
func (p *parser) object(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	top := p.depth == 1
	p.pos++ // '{'
	base := len(dst)
	dst = append(dst, '{')
	mark := len(p.members)
	sorted := true // the members read so far are in canonical order
	p.path = append(p.path, pathElem{})
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
			m := member{name: nameRef{start: rawStart, end: p.pos - 1}, start: len(dst)}
			if escaped {
				names, err := p.unescape(p.names, raw, rawStart)
				if err != nil {
					return nil, err
				}
				m.name = nameRef{start: len(p.names), end: len(names), escaped: true}
				p.names = names
				dst = appendQuoted(dst, p.nameOf(m.name))
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
			p.path[len(p.path)-1] = pathElem{name: m.name}
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
			p.path[len(p.path)-1] = pathElem{name: ms[i].name}
			return nil, &DuplicateMemberError{Pointer: p.pointer()}
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
func (p *parser) sortMembers(ms []member) {
	if len(ms) > 12 {
		slices.SortFunc(ms, func(a, b member) int { return p.compareNames(a.name, b.name) })
		return
	}
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && p.compareNames(ms[j-1].name, ms[j].name) > 0; j-- {
			ms[j-1], ms[j] = ms[j], ms[j-1]
		}
	}
}

// compareNames orders member names by their UTF-16 code units.
func (p *parser) compareNames(a, b nameRef) int {
	return compareUTF16(p.nameOf(a), p.nameOf(b))
}

// rewrite rewrites the object that starts at dst[base] with its members in
// the order of ms, which holds their offsets in the current output, and
// updates those offsets.
func (p *parser) rewrite(dst []byte, base int, ms []member) []byte {
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
func (p *parser) array(dst []byte) ([]byte, error) {
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
	p.path = append(p.path, pathElem{isIndex: true})
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
