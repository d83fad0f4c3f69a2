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
		"github.com/idemkit/idem/idemmysql.(*Store).claimStatement":                       PkgIdemmysql,
		"github.com/go-sql-driver/mysql.(*mysqlConn).interpolateParams":                   PkgMySQL,
		"database/sql.(*DB).execDC":                                                       PkgStd,
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

// TestWriteInstructionsOmitsAbsentGroups leaves out the columns of the
// other database's store and driver, and keeps a group that one result has.
func TestWriteInstructionsOmitsAbsentGroups(t *testing.T) {
	var b strings.Builder
	WriteInstructions(&b, []InstrResult{
		{Variant: "two-phase", PerRequest: 3000, ByPackage: map[string]float64{PkgIdem: 1000, PkgIdemmysql: 500, PkgMySQL: 1500}},
		{Variant: "floor-2commit", PerRequest: 1000, ByPackage: map[string]float64{PkgMySQL: 1000}},
	})
	header := strings.Fields(strings.SplitN(b.String(), "\n", 2)[0])
	want := []string{"kinstr/req", "total", PkgIdem, PkgIdemmysql, PkgMySQL}
	if strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("header %q, want %q", header, want)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if got := strings.Join(strings.Fields(lines[len(lines)-1]), " "); got != "floor-2commit 1.0 0.0 0.0 1.0" {
		t.Errorf("floor-2commit's row %q; table:\n%s", got, b.String())
	}
}
