// Package keyspec is the one definition of a valid idempotency key: its
// length limit, the characters of its two wire forms, the parser of an
// Idempotency-Key field and the formatter that writes one.
//
// The server (package idem), the client (idemclient), the checker
// (internal/check) and its test server build on it, so that the client
// never sends a field the server refuses.
//
// A key is 1 to [MaxLength] printable ASCII characters (0x20 to 0x7e). On
// the wire it is either an RFC 9651 sf-string, the form the draft standard
// requires,
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// optionally followed by parameters, which are parsed and ignored, or a bare
// token of letters, digits and "_-.:~/+=", the form many real clients send.
package keyspec
