module github.com/idemkit/idem/idemgrpc

go 1.25.0

require github.com/idemkit/idem v0.0.0-00010101000000-000000000000

replace github.com/idemkit/idem => ../

require (
	github.com/idemkit/idem/idemrpc v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260803160001-6ac0973c030d
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/idemkit/idem/idemsqlite v0.0.0-00010101000000-000000000000 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260803160001-6ac0973c030d // indirect
	modernc.org/libc v1.76.0 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.59.0 // indirect
)

replace github.com/idemkit/idem/idemrpc => ../idemrpc

require (
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0
	github.com/idemkit/idem/api v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idempg v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/internal/pgtest v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/internal/storetest v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.13.0
)

replace (
	github.com/idemkit/idem/api => ../api
	github.com/idemkit/idem/idempg => ../idempg
	github.com/idemkit/idem/idemsqlite => ../idemsqlite
	github.com/idemkit/idem/internal/pgtest => ../internal/pgtest
)

replace github.com/idemkit/idem/internal/storetest => ../internal/storetest
