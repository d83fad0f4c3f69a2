module github.com/idemkit/idem/cmd/idemproxy/interop

go 1.25.0

replace github.com/idemkit/idem => ../../..

require (
	github.com/idemkit/idem/idemsqlite v0.0.0-00010101000000-000000000000
	github.com/stripe/stripe-go/v84 v84.4.1
)

require github.com/idemkit/idem v0.0.0-00010101000000-000000000000

require (
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/idemkit/idem/cmd v0.0.0-00010101000000-000000000000
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/sys v0.47.0 // indirect
	modernc.org/libc v1.76.0 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.59.0 // indirect
)

replace github.com/idemkit/idem/cmd => ../../../cmd

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
