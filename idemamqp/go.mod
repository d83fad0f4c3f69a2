module github.com/idemkit/idem/idemamqp

go 1.25.0

require (
	github.com/idemkit/idem v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idempg v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/internal/pgtest v0.0.0-00010101000000-000000000000
)

require github.com/idemkit/idem/idemsqlite v0.0.0-00010101000000-000000000000 // indirect

require (
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/idemkit/idem/internal/storetest v0.0.0-00010101000000-000000000000
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.13.0
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	modernc.org/libc v1.76.0 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.59.0 // indirect
)

replace github.com/idemkit/idem => ../

replace github.com/idemkit/idem/idempg => ../idempg

replace github.com/idemkit/idem/idemsqlite => ../idemsqlite

replace github.com/idemkit/idem/internal/pgtest => ../internal/pgtest

replace github.com/idemkit/idem/internal/storetest => ../internal/storetest
