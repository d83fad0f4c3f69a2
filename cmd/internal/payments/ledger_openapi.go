package payments

import "github.com/idemkit/idem"

// addLedgerPaths publishes the accounts and transfers routes in the
// OpenAPI document's paths; policy is the published idempotency policy.
func addLedgerPaths(paths map[string]any, policy string) {
	keyParam := map[string]any{
		"name": idem.HeaderKey, "in": "header", "required": true,
		"description": "A unique key per logical operation (a v4 UUID). " + policy,
		"schema":      map[string]any{"type": "string", "maxLength": idem.MaxKeyLength},
	}
	problemOf := func(description string) map[string]any {
		return map[string]any{"description": description, "content": map[string]any{
			"application/problem+json": map[string]any{"schema": problemSchema},
		}}
	}
	jsonOf := func(description string, schema map[string]any) map[string]any {
		return map[string]any{"description": description, "content": map[string]any{
			"application/json": map[string]any{"schema": schema},
		}}
	}
	body := func(schema map[string]any) map[string]any {
		return map[string]any{"required": true, "content": map[string]any{
			"application/json":                  map[string]any{"schema": schema},
			"application/x-www-form-urlencoded": map[string]any{"schema": schema},
		}}
	}
	idParam := func(what string) []any {
		return []any{map[string]any{
			"name": "id", "in": "path", "required": true, "description": "The " + what + "'s id.",
			"schema": map[string]any{"type": "string"},
		}}
	}
	// The answers every idempotent ledger POST shares with payments.
	common := func(created map[string]any) map[string]any {
		return map[string]any{
			"201": created,
			"400": problemOf("Missing or malformed Idempotency-Key, or an invalid parameter (invalid-parameter; \"param\" names it). Not stored: a corrected retry may reuse the key."),
			"401": problemOf("Invalid credentials."),
			"409": problemOf("A request with this key is still in progress; retry after Retry-After."),
			"413": problemOf("The body is larger than the limit (payload-too-large)."),
			"415": problemOf("The body is not application/json or a form (unsupported-media-type)."),
			"422": problemOf("The key was used with a different request; \"fields\" names what differs."),
			"500": problemOf("The service failed and everything rolled back; retry with the same key."),
			"503": problemOf("The idempotency store or the database did not answer (nothing was done), or the outcome of the commit is unknown; retry with the same key after Retry-After."),
		}
	}
	accountCreated := common(jsonOf("Created; the account is at Location. A retry with the same key replays this response with Idempotent-Replayed: true.", accountSchema))
	transferCreated := common(jsonOf("Created: the money moved, and a transfer.created event was enqueued in the same transaction. The transfer is at Location. A retry with the same key replays this response with Idempotent-Replayed: true.", transferSchema))
	transferCreated["400"] = problemOf("Missing or malformed Idempotency-Key, or an invalid parameter (invalid-parameter; \"param\" names it): from or to names no account of yours, the accounts hold different currencies, or to's balance would pass the limit. Nothing moved; not stored, so a corrected retry may reuse the key.")
	transferCreated["402"] = problemOf("The source account holds less than the amount (insufficient-funds). Nothing moved. A definitive outcome: stored with the key and replayed, even after the account is credited; a new attempt needs a new key.")
	notFound := problemOf("You have none with this id (not-found); another client's ids are never found.")

	paths["/v1/accounts"] = map[string]any{"post": map[string]any{
		"summary":     "Open an account with an opening balance",
		"parameters":  []any{keyParam},
		"requestBody": body(accountParamsSchema),
		"responses":   accountCreated,
	}}
	paths["/v1/accounts/{id}"] = map[string]any{"get": map[string]any{
		"summary": "Retrieve one of your accounts, with its balance", "parameters": idParam("account"),
		"responses": map[string]any{"200": jsonOf("The account.", accountSchema), "401": problemOf("Invalid credentials."), "404": notFound},
	}}
	paths["/v1/transfers"] = map[string]any{"post": map[string]any{
		"summary": "Move money between two of your accounts in one currency",
		"description": "One database transaction locks both accounts (the lower id first, so opposite transfers never deadlock), " +
			"moves the amount, records the transfer, enqueues transfer.created and stores the response with the key. " +
			"Balances never go below zero.",
		"parameters":  []any{keyParam},
		"requestBody": body(transferParamsSchema),
		"responses":   transferCreated,
	}}
	paths["/v1/transfers/{id}"] = map[string]any{"get": map[string]any{
		"summary": "Retrieve one of your transfers", "parameters": idParam("transfer"),
		"responses": map[string]any{"200": jsonOf("The transfer.", transferSchema), "401": problemOf("Invalid credentials."), "404": notFound},
	}}
}

// minorUnits describes an amount or balance.
const minorUnits = "In the currency's minor unit, read exactly: a fraction is refused, never rounded."

var accountParamsSchema = map[string]any{
	"type": "object", "required": []string{"currency", "balance"}, "additionalProperties": false,
	"properties": map[string]any{
		"currency": map[string]any{"type": "string", "pattern": "^[A-Za-z]{3}$"},
		"balance":  map[string]any{"type": "integer", "minimum": 0, "maximum": int64(MaxAmount), "description": "The opening balance. " + minorUnits},
	},
}

var transferParamsSchema = map[string]any{
	"type": "object", "required": []string{"from", "to", "amount"}, "additionalProperties": false,
	"properties": map[string]any{
		"from":   map[string]any{"type": "string", "minLength": 1, "maxLength": accountIDMax, "description": "An account of yours."},
		"to":     map[string]any{"type": "string", "minLength": 1, "maxLength": accountIDMax, "description": "Another account of yours, in the currency of from."},
		"amount": map[string]any{"type": "integer", "minimum": 1, "maximum": int64(MaxAmount), "description": minorUnits},
	},
}

var accountSchema = map[string]any{
	"type": "object", "required": []string{"id", "object", "currency", "balance", "created"},
	"properties": map[string]any{
		"id":       map[string]any{"type": "string"},
		"object":   map[string]any{"type": "string", "enum": []string{"account"}},
		"currency": map[string]any{"type": "string"},
		"balance":  map[string]any{"type": "integer", "minimum": 0, "maximum": int64(MaxAmount)},
		"created":  map[string]any{"type": "integer", "description": "Unix seconds."},
	},
}

var transferSchema = map[string]any{
	"type": "object", "required": []string{"id", "object", "from", "to", "amount", "currency", "created"},
	"properties": map[string]any{
		"id":       map[string]any{"type": "string"},
		"object":   map[string]any{"type": "string", "enum": []string{"transfer"}},
		"from":     map[string]any{"type": "string"},
		"to":       map[string]any{"type": "string"},
		"amount":   map[string]any{"type": "integer", "minimum": 1},
		"currency": map[string]any{"type": "string"},
		"created":  map[string]any{"type": "integer", "description": "Unix seconds."},
	},
}

// problemSchema is an RFC 9457 problem document as idem writes it.
var problemSchema = map[string]any{
	"type": "object", "required": []string{"type", "title", "status"},
	"properties": map[string]any{
		"type":   map[string]any{"type": "string", "description": "Resolve it (GET) for a description of the problem."},
		"title":  map[string]any{"type": "string"},
		"status": map[string]any{"type": "integer"},
		"detail": map[string]any{"type": "string"},
		"param":  map[string]any{"type": "string", "description": "The parameter that is missing or invalid (invalid-parameter)."},
	},
}
