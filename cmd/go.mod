module github.com/idemkit/idem/cmd

go 1.25.0

require github.com/idemkit/idem v0.0.0-00010101000000-000000000000

replace github.com/idemkit/idem => ../

require (
	connectrpc.com/connect v1.21.0
	github.com/idemkit/idem/api v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idemconnect v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idemgrpc v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idemrpc v0.0.0-00010101000000-000000000000
	google.golang.org/grpc v1.84.0
)

replace (
	github.com/idemkit/idem/api => ../api
	github.com/idemkit/idem/idemconnect => ../idemconnect
	github.com/idemkit/idem/idemgrpc => ../idemgrpc
	github.com/idemkit/idem/idemrpc => ../idemrpc
)

require (
	github.com/Shopify/toxiproxy/v2 v2.12.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/idemkit/idem/idemmysql v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idemotel v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idempg v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idemprom v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idemredis v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idemsqlite v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/internal/pgtest v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.13.0
	github.com/nats-io/nats.go v1.52.0
	github.com/prometheus/client_golang v1.23.2
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/rs/zerolog v1.35.1
	go.opentelemetry.io/otel v1.46.0
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp v1.46.0
	go.opentelemetry.io/otel/sdk v1.46.0
	go.opentelemetry.io/proto/otlp v1.11.0
	gonum.org/v1/plot v0.17.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260819154853-08b0e4226688
	google.golang.org/protobuf v1.36.12
	modernc.org/sqlite v1.59.0
)

require (
	github.com/klauspost/compress v1.18.5 // indirect
	github.com/nats-io/nkeys v0.4.15 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.55.0 // indirect
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	filippo.io/edwards25519 v1.2.0 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/mux v1.8.1 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.30.0 // indirect
	github.com/idemkit/idem/idemamqp v0.0.0-00010101000000-000000000000
	github.com/idemkit/idem/idemnats v0.0.0-00010101000000-000000000000
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/rs/xid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.46.0 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/net v0.58.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260819154853-08b0e4226688 // indirect
	gopkg.in/tomb.v1 v1.0.0-20141024135613-dd632973f1e7 // indirect
	modernc.org/libc v1.76.0 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)

replace (
	github.com/idemkit/idem/idemmysql => ../idemmysql
	github.com/idemkit/idem/idemotel => ../idemotel
	github.com/idemkit/idem/idempg => ../idempg
	github.com/idemkit/idem/idemprom => ../idemprom
	github.com/idemkit/idem/idemredis => ../idemredis
	github.com/idemkit/idem/idemsqlite => ../idemsqlite
	github.com/idemkit/idem/internal/pgtest => ../internal/pgtest
)

replace github.com/idemkit/idem/idemnats => ../idemnats

replace github.com/idemkit/idem/idemamqp => ../idemamqp

replace github.com/idemkit/idem/internal/storetest => ../internal/storetest
