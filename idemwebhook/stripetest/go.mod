module github.com/idemkit/idem/idemwebhook/stripetest

go 1.25.0

require github.com/idemkit/idem v0.0.0-00010101000000-000000000000

require github.com/stripe/stripe-go/v82 v82.5.1

replace github.com/idemkit/idem => ../../
