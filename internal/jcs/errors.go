package jcs

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package matches one of them
// with [errors.Is].
var (
	// ErrSyntax reports input that is not well-formed JSON text. It is
	// wrapped by [*SyntaxError], which gives the offset.
	ErrSyntax = errors.New("jcs: syntax error")

	// ErrDuplicateMember reports an object with two members of the same name.
	// It is wrapped by [*DuplicateMemberError], which gives the member.
	ErrDuplicateMember = errors.New("jcs: duplicate object member")

	// ErrNotObject reports that [Members] was given a JSON value that is not
	// an object.
	ErrNotObject = errors.New("jcs: value is not an object")

	// ErrTooDeep reports arrays and objects nested more than [MaxDepth]
	// levels.
	ErrTooDeep = errors.New("jcs: nesting too deep")

	// ErrNumber reports a number that cannot be represented as a finite IEEE
	// 754 double, such as 1e400.
	ErrNumber = errors.New("jcs: number out of range")
)

// SyntaxError describes malformed input: invalid JSON grammar, data after the
// top-level value, bytes that are not valid UTF-8, or a \u escape encoding a
// lone surrogate.
type SyntaxError struct {
	// Offset is the zero-based byte offset in the input at which the problem
	// was detected; it equals the input length when the input ended early.
	Offset int64
	// Msg describes the problem.
	Msg string
}

// Error implements the error interface.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("jcs: syntax error at offset %d: %s", e.Offset, e.Msg)
}

// Unwrap returns [ErrSyntax].
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// DuplicateMemberError reports an object member whose name, after unescaping,
// equals the name of another member of the same object.
type DuplicateMemberError struct {
	// Pointer is the RFC 6901 JSON pointer of the duplicated member, such as
	// "/customer" or "/items/0/sku".
	Pointer string
}

// Error implements the error interface.
func (e *DuplicateMemberError) Error() string {
	return fmt.Sprintf("jcs: duplicate object member %q", e.Pointer)
}

// Unwrap returns [ErrDuplicateMember].
func (e *DuplicateMemberError) Unwrap() error { return ErrDuplicateMember }
