// Module openapicheck validates paymentsd's OpenAPI document and the
// tour's requests and responses with an OpenAPI 3.1 validator. It is a
// module of its own so that the validator and its dependencies never
// reach the go.mod of idem's users. Run: cd cmd/internal/openapicheck && go test ./...
module github.com/idemkit/idem/cmd/internal/openapicheck

go 1.26.0

require (
	github.com/idemkit/idem v0.0.0
	github.com/pb33f/libopenapi v0.42.5
	github.com/pb33f/libopenapi-validator v0.16.3
)

require (
	connectrpc.com/connect v1.21.0 // indirect
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-sql-driver/mysql v1.10.1 // indirect
	github.com/idemkit/idem/api v0.0.0-00010101000000-000000000000 // indirect
	github.com/idemkit/idem/idemconnect v0.0.0-00010101000000-000000000000 // indirect
	github.com/idemkit/idem/idemgrpc v0.0.0-00010101000000-000000000000 // indirect
	github.com/idemkit/idem/idemmysql v0.0.0-00010101000000-000000000000 // indirect
	github.com/idemkit/idem/idempg v0.0.0-00010101000000-000000000000 // indirect
	github.com/idemkit/idem/idemredis v0.0.0-00010101000000-000000000000 // indirect
	github.com/idemkit/idem/idemrpc v0.0.0-00010101000000-000000000000 // indirect
	github.com/idemkit/idem/idemsqlite v0.0.0-00010101000000-000000000000 // indirect
	github.com/redis/go-redis/v9 v9.22.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260819154853-08b0e4226688 // indirect
	google.golang.org/grpc v1.84.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

require (
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/basgys/goxml2json v1.1.1-0.20231018121955-e66ee54ceaad // indirect
	github.com/buger/jsonparser v1.6.1 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/go-openapi/jsonpointer v1.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/idemkit/idem/cmd v0.0.0-00010101000000-000000000000
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.13.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/pb33f/go-yaml v0.1.1 // indirect
	github.com/pb33f/jsonpath v0.8.5 // indirect
	github.com/pb33f/jsonschema/v6 v6.0.3 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.2 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	modernc.org/libc v1.76.0 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.59.0 // indirect
)

replace github.com/idemkit/idem => ../../..

replace github.com/idemkit/idem/cmd => ../..

replace github.com/idemkit/idem/idempg => ../../../idempg

replace github.com/idemkit/idem/idemsqlite => ../../../idemsqlite

replace github.com/idemkit/idem/idemprom => ../../../idemprom

replace github.com/idemkit/idem/internal/pgtest => ../../../internal/pgtest

replace github.com/idemkit/idem/idemmysql => ../../../idemmysql

replace github.com/idemkit/idem/idemredis => ../../../idemredis

replace github.com/idemkit/idem/api => ../../../api

replace github.com/idemkit/idem/idemrpc => ../../../idemrpc

replace github.com/idemkit/idem/idemgrpc => ../../../idemgrpc

replace github.com/idemkit/idem/idemconnect => ../../../idemconnect

replace github.com/idemkit/idem/internal/storetest => ../../../internal/storetest
