package jcs

import (
	"bytes"
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

// encoderPool holds the Encoders of Options' methods, whose buffers are
// reused.
var encoderPool = sync.Pool{New: func() any { return new(Encoder) }}

// encoder returns an Encoder with the options o, from the pool.
func (o Options) encoder() *Encoder {
	e := encoderPool.Get().(*Encoder)
	e.Options = o
	return e
}

// release returns e to the pool.
func (e *Encoder) release() {
	e.Release()
	encoderPool.Put(e)
}

// Canonicalize is [Canonicalize] with the options o.
func (o Options) Canonicalize(src []byte) ([]byte, error) {
	e := o.encoder()
	defer e.release()
	c, err := e.Append(make([]byte, 0, len(src)), src)
	if err != nil {
		return nil, err
	}
	return c.Text, nil
}

// Members is [Members] with the options o.
func (o Options) Members(src []byte) ([]Member, error) {
	e := o.encoder()
	defer e.release()
	c, err := e.Append(make([]byte, 0, len(src)), src)
	if err != nil {
		return nil, err
	}
	if !c.IsObject {
		return nil, ErrNotObject
	}
	members := make([]Member, e.Len())
	for i := range members {
		name, _, valueStart, end := e.Member(i)
		members[i] = Member{Name: string(name), Value: c.Text[valueStart:end:end]}
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
// and [Encoder.Append] return it.
type Canonical struct {
	// Text is the buffer given to Append with the canonical form, what
	// [Options.Canonicalize] returns, appended.
	Text []byte
	// IsObject reports whether the text is a JSON object.
	IsObject bool
	// Members are the members of a top-level object in canonical order,
	// with offsets into Text, from [Options.Append]. Nil when the text is
	// not an object, and from [Encoder.Append].
	Members []MemberSpan
}

// Append is [Options.Canonicalize] and [Options.Members] in one pass: it
// appends the canonical form of src to dst and, when src is an object, the
// spans of its members to members. It fails with the errors of
// Canonicalize.
func (o Options) Append(dst, src []byte, members []MemberSpan) (Canonical, error) {
	e := o.encoder()
	defer e.release()
	c, err := e.Append(dst, src)
	if err != nil {
		return Canonical{}, err
	}
	if c.IsObject {
		for i := range e.Len() {
			name, start, valueStart, end := e.Member(i)
			if e.p.members[i].name.escaped {
				name = bytes.Clone(name) // e's buffer goes back to the pool
			}
			members = append(members, MemberSpan{Name: name, Start: start, ValueStart: valueStart, End: end})
		}
		c.Members = members
	}
	return c, nil
}

// An Encoder writes canonical forms, as [Options.Append] does, in buffers
// it keeps from one text to the next: the fingerprint that the middleware
// computes for every request uses one per request, from a pool. Its zero
// value is ready to use with the zero Options. It is not safe for
// concurrent use.
//
// It reads the text once, front to back, and writes each value's canonical
// form as it reads it: a string without escapes and a short integer are
// copied as they are, an object whose members come in canonical order is
// written as it comes, and only an object whose members do not is written
// again in their order, once it is read. It keeps no tree: the members of
// the objects open at the current position, and the top-level object's
// members, which [Encoder.Member] reports.
type Encoder struct {
	Options
	p parser
}

// Append appends the canonical form of src to dst, and reports whether src
// is an object, whose members [Encoder.Len] and [Encoder.Member] then
// report, until the next call. It fails with the errors of [Canonicalize].
// The Members of the Canonical it returns are nil: Options.Append's are
// built from e's.
func (e *Encoder) Append(dst, src []byte) (Canonical, error) {
	p := &e.p
	p.src, p.pos, p.depth, p.exact, p.topIsObject = src, 0, 0, e.ExactNumbers, false
	p.members, p.names = p.members[:0], p.names[:0]
	out, err := p.document(dst)
	if err != nil {
		p.members = p.members[:0]
		return Canonical{}, err
	}
	if !p.topIsObject {
		p.members = p.members[:0]
	}
	return Canonical{Text: out, IsObject: p.topIsObject}, nil
}

// Len returns the number of members of the object that the last call of
// [Encoder.Append] read; 0 when it was not an object.
func (e *Encoder) Len() int { return len(e.p.members) }

// Member returns the member i of the object that the last call of
// [Encoder.Append] read, in canonical order, as a [MemberSpan] holds it: its
// name, unescaped, which may share memory with the text and with e, and
// its offsets in the canonical text.
func (e *Encoder) Member(i int) (name []byte, start, valueStart, end int) {
	m := &e.p.members[i]
	return e.p.nameOf(m.name), m.start, m.valueStart, m.end
}

// Limits on the buffers an Encoder keeps through [Encoder.Release], so that
// one huge text does not pin memory.
const (
	maxKeptBytes   = 64 << 10
	maxKeptMembers = 1024
)

// Release drops e's references to the last text and the buffers that
// grew beyond what is worth keeping, for an Encoder that goes back to a
// pool.
func (e *Encoder) Release() {
	p := &e.p
	p.src, p.members = nil, p.members[:0]
	if cap(p.members) > maxKeptMembers {
		p.members = nil
	}
	if cap(p.scratch) > maxKeptBytes {
		p.scratch = nil
	}
	if cap(p.names) > maxKeptBytes {
		p.names = nil
	}
	if cap(p.reorder) > maxKeptBytes {
		p.reorder = nil
	}
}
