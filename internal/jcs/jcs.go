package jcs

import (
	"bytes"
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
