package bench

import (
	"strings"
	"testing"
)

func TestPackageGroup(t *testing.T) {
	for sym, want := range map[string]string{
		"github.com/idemkit/idem.(*Middleware).ServeHTTP":                                 PkgIdem,
		"github.com/idemkit/idem/internal/jcs.(*parser).object":                           PkgIdem,
		"github.com/idemkit/idem/idempg.(*Store).claimDeferred":                           PkgIdempg,
		"github.com/idemkit/idem/cmd/internal/payments.(*Service).Create":                 PkgApp,
		"github.com/idemkit/idem/internal/bearer.(*Tokens).lookup":                        PkgApp,
		"github.com/jackc/pgx/v5/pgconn.(*PgConn).ReceiveMessage":                         PkgPgx,
		"github.com/jackc/pgx/v5.(*Conn).SendBatch":                                       PkgPgx,
		"net/http.(*conn).serve":                                                          PkgHTTP,
		"net/textproto.(*Reader).ReadMIMEHeader":                                          PkgHTTP,
		"runtime.mallocgc":                                                                PkgRuntime,
		"internal/runtime/maps.(*Map).getWithKeySmall":                                    PkgRuntime,
		"crypto/sha256.(*Digest).Write":                                                   PkgStd,
		"slices.SortFunc[go.shape.[]string,go.shape.string]":                              PkgStd,
		"github.com/idemkit/idem/internal/fingerprint.appendJSONString[go.shape.[]uint8]": PkgIdem,
		"__memcpy_avx_unaligned_erms":                                                     PkgOther,
		"0x0000000000401000":                                                              PkgOther,
	} {
		if got := packageGroup(sym); got != want {
			t.Errorf("packageGroup(%q) = %q, want %q", sym, got, want)
		}
	}
}

// TestParseCallgrind reads a callgrind file with compressed names: the
// cost line after calls= is the call's inclusive cost, not the caller's.
func TestParseCallgrind(t *testing.T) {
	const file = `version: 1
creator: callgrind-3.19.0
events: Ir

ob=(1) /tmp/idem
fl=(1) /src/middleware.go
fn=(1) github.com/idemkit/idem.(*Middleware).ServeHTTP
10 100
+2 50
cfl=(2) /src/malloc.go
cfn=(2) runtime.mallocgc
calls=3 20
* 9000
fl=(2)
fn=(2)
20 700
fn=(3) github.com/jackc/pgx/v5.(*Conn).Exec
5 30
fn=(1)
11 1

totals: 881
`
	got, err := parseCallgrind(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{PkgIdem: 151, PkgRuntime: 700, PkgPgx: 30}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d", k, got[k], v)
		}
	}
}
