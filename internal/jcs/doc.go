// Package jcs implements the JSON Canonicalization Scheme of RFC 8785 (JCS).
//
// idem fingerprints a request by hashing the canonical form of its JSON body,
// so two bodies that differ only in member order, whitespace, string escaping
// or number spelling produce the same fingerprint:
//
//	{"b":1, "a":2}      ->  {"a":2,"b":1}
//	4200, 4200.0, 4.2e3 ->  4200
//	"\u00e9"            ->  "é"
//
// [Canonicalize] returns the canonical form of a whole JSON text. [Members]
// splits a top-level object into its members, each value in canonical form,
// which lets a caller fingerprint selected fields or report which field of a
// reused request differs. [Options.Append] does both in one pass, and an
// [Encoder] does it into buffers it keeps from one text to the next: the
// middleware's fingerprint, which runs on every request, keeps one in each
// of its pooled scratch spaces.
//
// The pass writes each value as it reads it. What is already canonical,
// as most of a typical request is (strings without escapes, integers of up
// to 15 digits, objects whose members come in order), is copied as it is;
// strings are scanned eight bytes at a time. Only an object whose members
// come out of order is sorted, and written again, once it has been read.
// No tree is built and no path is kept: the pointer of a duplicate member
// is built as the error returns through the objects and arrays around it.
//
// # The canonical form
//
// The output follows RFC 8785 section 3.2:
//
//   - Whitespace between tokens is removed.
//   - Object members are sorted by the UTF-16 code units of their names, not by
//     their UTF-8 bytes: a name with a character above U+FFFF sorts by its
//     surrogate pair, so "\ud83d\ude00" comes before "\ufb33".
//   - Strings escape only '"', '\' and the control characters U+0000 to U+001F
//     (as \b, \t, \n, \f, \r, or \u00xx with lowercase hex). Every other
//     character, including U+007F and all non-ASCII characters, is written as
//     literal UTF-8.
//   - Numbers are read as IEEE 754 doubles and written the way ECMAScript's
//     Number.prototype.toString writes them: the shortest digits that read back
//     to the same double, -0 as 0, integers below 1e21 without an exponent,
//     otherwise forms such as 1e+21, 1e-7 and 1.5e-7.
//   - The literals true, false and null are kept.
//
// # What is rejected
//
// RFC 8785 requires its input to be I-JSON (RFC 7493). This package rejects
// input that would make a canonical form ambiguous or impossible:
//
//   - Malformed JSON, including data after the top-level value, a byte order
//     mark, and bytes that are not valid UTF-8: a [*SyntaxError].
//   - A \u escape that encodes a lone surrogate (a high surrogate not followed
//     by a low one, or a low surrogate on its own): a [*SyntaxError]. Such a
//     string has no UTF-8 form, so it cannot be written canonically.
//   - An object with two members of the same name, after unescaping ("a" and
//     "\u0061" are the same name): a [*DuplicateMemberError] that wraps
//     [ErrDuplicateMember] and names the duplicate with an RFC 6901 JSON
//     pointer. Most JSON decoders keep the last duplicate silently, so a body
//     with duplicates means different things to different readers.
//   - A number whose magnitude is too large for a double (1e400 would become
//     infinity): [ErrNumber]. A number too small for a double reads as 0, as it
//     does in ECMAScript.
//   - Arrays and objects nested more than [MaxDepth] levels: [ErrTooDeep].
//
// Unicode noncharacters such as U+FFFF are accepted and written literally:
// they have a unique UTF-8 form and do not make the output ambiguous.
//
// Because numbers are read as doubles, integers beyond 2^53 lose precision
// exactly as they do in ECMAScript: 9007199254740993 canonicalises to
// 9007199254740992. [Options.ExactNumbers] keeps such numbers exact instead,
// for a caller that compares canonical forms (a fingerprint must not equate
// two ids that differ in their 19th digit); the output then departs from RFC
// 8785 for those numbers only.
//
// Strings are not normalised (RFC 8785 section 3.1): "é" written as one code
// point and as "e" followed by a combining accent stay different.
package jcs
