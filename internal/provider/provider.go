package provider

import "context"

// The interfaces below are deliberately small: a consumer names only the
// methods it calls. Every method takes ctx first and returns errors
// classified as described in the package documentation.

// OfferSearcher finds rentable offers.
type OfferSearcher interface {
	// SearchOffers returns offers matching q, in the order q asks for.
	SearchOffers(ctx context.Context, q Query) ([]Offer, error)
}

// InstanceCreator rents offers.
type InstanceCreator interface {
	// CreateInstance rents req.OfferID. It is NOT idempotent and is never
	// retried: an ambiguous outcome returns *OutcomeUnknownError naming
	// req.Label, and the caller reconciles by listing that label.
	CreateInstance(ctx context.Context, req CreateRequest) (CreateResult, error)
}

// InstanceReader observes instances.
type InstanceReader interface {
	// ShowInstance returns one instance, or an error wrapping ErrNotFound
	// when it does not exist (including after destroy).
	ShowInstance(ctx context.Context, id InstanceID) (Instance, error)
	// ListInstances returns every instance matching opts across all pages.
	// A listing that failed or could not be completed is an error (wrapping
	// ErrIncompleteListing when pages were missed), never an empty result.
	ListInstances(ctx context.Context, opts ListOptions) ([]Instance, error)
}

// InstanceDestroyer ends rentals. Destroy is idempotent: an instance that is
// already gone is success.
type InstanceDestroyer interface {
	DestroyInstance(ctx context.Context, id InstanceID) error
}

// InstanceManager changes a live instance.
type InstanceManager interface {
	LabelInstance(ctx context.Context, id InstanceID, label string) error
	StopInstance(ctx context.Context, id InstanceID) error
	StartInstance(ctx context.Context, id InstanceID) error
	AttachSSHKey(ctx context.Context, id InstanceID, publicKey string) error
	// RequestLogs asks for the container (or daemon) log tail and waits for
	// its text.
	RequestLogs(ctx context.Context, id InstanceID, req LogRequest) (string, error)
}

// Account reads the account behind the key.
type Account interface {
	CurrentUser(ctx context.Context) (User, error)
	Charges(ctx context.Context, q ChargeQuery) ([]Charge, error)
	APIKeys(ctx context.Context) ([]APIKeyInfo, error)
	SSHKeys(ctx context.Context) ([]SSHKey, error)
	AddSSHKey(ctx context.Context, publicKey string) (SSHKey, error)
}

// Marketplace is everything a full provider offers. Only the conformance
// suite and wiring code should need all of it.
type Marketplace interface {
	OfferSearcher
	InstanceCreator
	InstanceReader
	InstanceDestroyer
	InstanceManager
	Account
}

// Market is what a run needs from the marketplace: find offers, rent,
// watch, destroy, attach the run's SSH key, and read what was charged.
// The lifecycle holds one; the retry decorator (retry.Market) and the
// team fence wrap one and are one. A decorator must write every method
// (none passes through undecorated) and offer BidChanger exactly when
// what it wraps does.
type Market interface {
	OfferSearcher
	InstanceCreator
	InstanceReader
	InstanceDestroyer
	AttachSSHKey(ctx context.Context, id InstanceID, publicKey string) error
	Charges(ctx context.Context, q ChargeQuery) ([]Charge, error)
}

// BidChanger is a Market's optional change-bid route (the real client and
// the retry decorator have it). A workflow finds it by type assertion, so
// a decorator of Market must offer it exactly when what it wraps does, or
// re-bidding is silently off behind it.
type BidChanger interface {
	ChangeBid(ctx context.Context, id InstanceID, price float64) error
}
