package jcs

import (
	"bytes"
	"slices"
	"unicode/utf8"
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
// members around needs no write barriers.
type nameRef struct {
	start, end int
	escaped    bool
	// first is the name's first byte, 0 for an empty name, which orders
	// most names without finding their bytes (see sortMembers). It takes
	// room that the struct has anyway.
	first byte
}

// nameOf returns the unescaped member name r locates.
func (p *parser) nameOf(r nameRef) []byte {
	if r.escaped {
		return p.names[r.start:r.end]
	}
	return p.src[r.start:r.end]
}

// object reads the object at p.pos and appends its canonical form to dst.
//
// Its members are written as they come. Each name is compared with the one
// before it: while each sorts after the last, which is how most objects
// arrive, the object is canonical as written, and no two names are the same
// unless two neighbours are. Only an object that arrives out of order is
// sorted, and written again in its order.
func (p *parser) object(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	src := p.src
	i := skipSpace(src, p.pos+1) // after '{'
	base := len(dst)
	dst = append(dst, '{')
	mark := len(p.members)
	sorted := true // the members read so far are in canonical order
	dup := false   // two neighbours have the same name
	if i < len(src) && src[i] == '}' {
		i++
	} else {
		for {
			if i >= len(src) || src[i] != '"' {
				p.pos = i
				return nil, p.syntaxError("expected string for object member name")
			}
			m := member{start: len(dst)}
			// A name of printable ASCII without escapes, as most are, is
			// its own canonical form.
			j := plainEnd(src, i+1)
			if j < len(src) && src[j] == '"' {
				m.name = nameRef{start: i + 1, end: j}
				if j > i+1 {
					m.name.first = src[i+1]
				}
				dst = append(dst, src[i:j+1]...)
				i = j + 1
			} else {
				p.pos = i
				raw, escaped, err := p.scanString()
				if err != nil {
					return nil, err
				}
				// raw starts one byte after the opening quote.
				rawStart := p.pos - len(raw) - 1
				m.name = nameRef{start: rawStart, end: p.pos - 1}
				if escaped {
					names, err := p.unescape(p.names, raw, rawStart)
					if err != nil {
						return nil, err
					}
					m.name = nameRef{start: len(p.names), end: len(names), escaped: true}
					p.names = names
					dst = appendQuoted(dst, p.nameOf(m.name))
				} else {
					dst = append(dst, src[rawStart-1:p.pos]...)
				}
				if name := p.nameOf(m.name); len(name) > 0 {
					m.name.first = name[0]
				}
				i = p.pos
			}
			i = skipSpace(src, i)
			if i >= len(src) || src[i] != ':' {
				p.pos = i
				return nil, p.syntaxError("expected ':' after object member name")
			}
			dst = append(dst, ':')
			p.pos = skipSpace(src, i+1)
			m.valueStart = len(dst)
			if len(p.members) > mark {
				// The member before is the last entry: the objects in
				// its value took theirs off when they closed.
				last, c := p.members[len(p.members)-1].name, 0
				if a, b := last.first, m.name.first; a != b && a|b < utf8.RuneSelf {
					// First bytes that differ and are ASCII, one code
					// unit each, decide; an empty name's 0 sorts first.
					c = int(a) - int(b)
				} else {
					c = compareUTF16(p.nameOf(last), p.nameOf(m.name))
				}
				switch {
				case c > 0:
					sorted = false
				case c == 0:
					dup = true
				}
			}
			// The member goes on the stack before its value is read, so
			// that it need not be kept across the call; its end is set
			// after. The objects in the value put theirs above it.
			k := len(p.members)
			p.members = append(p.members, m)
			var err error
			if dst, err = p.value(dst); err != nil {
				return nil, inMember(err, p.nameOf(p.members[k].name))
			}
			p.members[k].end = len(dst)
			i = skipSpace(src, p.pos)
			if i >= len(src) {
				p.pos = i
				return nil, p.syntaxError("unexpected end of input in object")
			}
			if src[i] == '}' {
				i++
				break
			}
			if src[i] != ',' {
				p.pos = i
				return nil, p.syntaxError("expected ',' or '}' after object member")
			}
			dst = append(dst, ',')
			i = skipSpace(src, i+1)
		}
	}
	p.pos = i
	dst = append(dst, '}')

	ms := p.members[mark:]
	if !sorted {
		// Any two neighbours may be the same now: sortMembers says.
		dup = p.sortMembers(ms)
		dst = p.rewrite(dst, base, ms)
	}
	if dup {
		for k := 1; k < len(ms); k++ {
			if name := p.nameOf(ms[k].name); bytes.Equal(p.nameOf(ms[k-1].name), name) {
				return nil, &DuplicateMemberError{Pointer: appendStep(nil, name)}
			}
		}
	}
	if p.depth == 1 {
		// The entries stay in place: nothing is read after this object.
		p.topIsObject = true
	} else {
		p.members = p.members[:mark]
	}
	p.depth--
	return dst, nil
}

// sortMembers sorts ms into canonical order: by insertion when they are
// few, as in most objects. It reports whether two neighbours may have the
// same name after: false only when it knows they do not.
//
// An insertion sort finds every such pair on its way: a member that has
// the name of one already sorted stops right after the last member whose
// name does not sort after its own, which has its name, and that is the
// comparison that stops it.
func (p *parser) sortMembers(ms []member) (dup bool) {
	if len(ms) > 12 {
		slices.SortFunc(ms, func(a, b member) int { return p.compareNames(a.name, b.name) })
		return true
	}
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0; j-- {
			c := 0
			if a, b := ms[j-1].name.first, ms[j].name.first; a != b && a|b < utf8.RuneSelf {
				// First bytes that differ and are ASCII decide, as in
				// compareNames, without the call.
				c = int(a) - int(b)
			} else {
				c = p.compareNames(ms[j-1].name, ms[j].name)
			}
			if c <= 0 {
				dup = dup || c == 0
				break
			}
			ms[j-1], ms[j] = ms[j], ms[j-1]
		}
	}
	return dup
}

// compareNames orders member names by their UTF-16 code units.
func (p *parser) compareNames(a, b nameRef) int {
	x, y := p.nameOf(a), p.nameOf(b)
	if len(x) > 0 && len(y) > 0 && x[0] != y[0] && x[0]|y[0] < utf8.RuneSelf {
		return int(x[0]) - int(y[0]) // as in object
	}
	return compareUTF16(x, y)
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
	src := p.src
	dst = append(dst, '[')
	p.pos = skipSpace(src, p.pos+1) // after '['
	if p.pos < len(src) && src[p.pos] == ']' {
		p.pos++
		p.depth--
		return append(dst, ']'), nil
	}
	for n := 0; ; n++ {
		var err error
		if dst, err = p.value(dst); err != nil {
			return nil, inElement(err, n)
		}
		i := skipSpace(src, p.pos)
		if i >= len(src) {
			p.pos = i
			return nil, p.syntaxError("unexpected end of input in array")
		}
		if src[i] == ']' {
			p.pos = i + 1
			break
		}
		if src[i] != ',' {
			p.pos = i
			return nil, p.syntaxError("expected ',' or ']' after array element")
		}
		dst = append(dst, ',')
		p.pos = skipSpace(src, i+1)
	}
	p.depth--
	return append(dst, ']'), nil
}
