package idempg

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// argCase is a parameter in its plain form and in its form of arg.go.
type argCase struct {
	name         string
	oid          uint32
	plain, typed any
}

// argCases are the parameters of insertNew and the claim guard, plain and
// typed, NULL ones included.
func argCases() []argCase {
	s, empty, b, none := "client-ä", "", []byte{0, 1, 2}, []byte(nil)
	n, code := int64(1)<<40, int64(201)
	t := time.Date(2026, 12, 7, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	return []argCase{
		{"text", pgtype.TextOID, s, (*textArg)(&s)},
		{"empty text", pgtype.TextOID, empty, (*textArg)(&empty)},
		{"null text", pgtype.TextOID, (*string)(nil), (*textArg)(nil)},
		{"bytea", pgtype.ByteaOID, b, (*bytesArg)(&b)},
		{"null bytea", pgtype.ByteaOID, none, (*bytesArg)(&none)},
		{"int8", pgtype.Int8OID, n, (*intArg)(&n)},
		{"int4", pgtype.Int4OID, int(code), (*intArg)(&code)},
		{"timestamptz", pgtype.TimestamptzOID, t, (*timeArg)(&t)},
		{"null timestamptz", pgtype.TimestamptzOID, (*time.Time)(nil), (*timeArg)(nil)},
	}
}

// TestTypedArgs: pgx encodes each argument type of arg.go into the same
// format and bytes as the plain value it stands for, NULL included.
func TestTypedArgs(t *testing.T) {
	m := pgtype.NewMap()
	for _, c := range argCases() {
		sd := &pgconn.StatementDescription{ParamOIDs: []uint32{c.oid}}
		var plain, typed pgx.ExtendedQueryBuilder
		if err := plain.Build(m, sd, []any{c.plain}); err != nil {
			t.Fatalf("%s: plain: %v", c.name, err)
		}
		if err := typed.Build(m, sd, []any{c.typed}); err != nil {
			t.Fatalf("%s: typed: %v", c.name, err)
		}
		p, q := plain.ParamValues[0], typed.ParamValues[0]
		if (p == nil) != (q == nil) || !bytes.Equal(p, q) || plain.ParamFormats[0] != typed.ParamFormats[0] {
			t.Errorf("%s: typed %q (format %d), want %q (format %d)", c.name, q, typed.ParamFormats[0], p, plain.ParamFormats[0])
		}
	}
}

// BenchmarkArgs makes and encodes the arguments of insertNew, plain and
// typed, as each Complete does.
func BenchmarkArgs(b *testing.B) {
	m := pgtype.NewMap()
	sd := &pgconn.StatementDescription{ParamOIDs: []uint32{
		pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.ByteaOID, pgtype.ByteaOID,
		pgtype.Int8OID, pgtype.Int4OID, pgtype.JSONBOID, pgtype.ByteaOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TextOID}}
	type row struct {
		client, key, method, path  string
		hash, fields, header, body []byte
		token, status              int64
		created, completed         time.Time
		trace                      string
		args                       [13]any
	}
	r := &row{client: "client", key: "key-123456789", method: "POST", path: "/payments",
		hash: make([]byte, 32), header: []byte(`{"Content-Type":["application/json"]}`), body: []byte(`{"id":"pay_1"}`),
		token: 1, status: 201, created: time.Now(), completed: time.Now(), trace: "00-abc"}
	b.Run("plain", func(b *testing.B) {
		var eqb pgx.ExtendedQueryBuilder
		b.ReportAllocs()
		for b.Loop() {
			r.args = [13]any{r.client, r.key, r.method, r.path, r.hash, r.fields, r.token, int(r.status), r.header, r.body, r.created, r.completed, &r.trace}
			if err := eqb.Build(m, sd, r.args[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed-but-text", func(b *testing.B) {
		var eqb pgx.ExtendedQueryBuilder
		b.ReportAllocs()
		for b.Loop() {
			r.args = [13]any{r.client, r.key, r.method, r.path,
				(*bytesArg)(&r.hash), (*bytesArg)(&r.fields), (*intArg)(&r.token), (*intArg)(&r.status), r.header, (*bytesArg)(&r.body),
				(*timeArg)(&r.created), (*timeArg)(&r.completed), (*textArg)(&r.trace)}
			if err := eqb.Build(m, sd, r.args[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed", func(b *testing.B) {
		var eqb pgx.ExtendedQueryBuilder
		b.ReportAllocs()
		for b.Loop() {
			r.args = [13]any{(*textArg)(&r.client), (*textArg)(&r.key), (*textArg)(&r.method), (*textArg)(&r.path),
				(*bytesArg)(&r.hash), (*bytesArg)(&r.fields), (*intArg)(&r.token), (*intArg)(&r.status), r.header, (*bytesArg)(&r.body),
				(*timeArg)(&r.created), (*timeArg)(&r.completed), (*textArg)(&r.trace)}
			if err := eqb.Build(m, sd, r.args[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
