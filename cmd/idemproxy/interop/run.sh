#!/bin/sh
# Runs idemproxy's interoperability test: stripe-go through idemproxy in
# front of stripe-mock. Installs stripe-mock when it is not on PATH or in
# GOPATH/bin.
set -eu
cd "$(dirname "$0")"
# A module of its own, outside the workspace: its go.mod says what it uses.
export GOWORK=off
if ! command -v stripe-mock >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/stripe-mock" ]; then
	go install github.com/stripe/stripe-mock@v0.203.0
fi
exec go test -count=1 -v "$@" .
