// Package openapicheck has no code: its test validates paymentsd's
// /openapi.json with github.com/pb33f/libopenapi-validator, and every
// request and response of the tour against it, problem responses included.
package openapicheck
