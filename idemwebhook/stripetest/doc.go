// Package stripetest checks idemwebhook's Stripe receiver against
// stripe-go's own webhook helpers: deliveries signed by
// webhook.GenerateTestSignedPayload are accepted or refused by the
// receiver exactly when webhook.ConstructEvent accepts or refuses them. It
// is a module of its own, so that idem's root module keeps to the standard
// library; it holds tests only.
package stripetest
