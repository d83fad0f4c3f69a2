package jcs

import (
	"bytes"
	"slices"
)

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
