// Package provider holds vastrun's view of a GPU marketplace: the domain
// types (offers, instances, charges), the small interfaces the rest of
// vastrun consumes, and the typed errors every implementation returns.
//
// It imports nothing of ours and speaks no HTTP. The real Vast client
// (package vast) implements these interfaces over the wire; the simulator
// (package sim) is an http.Handler that the same client talks to, so every
// test exercises real wire code. Package providertest holds the one
// conformance suite both must pass. The client sends each call once;
// package retry decorates it and decides which failed calls are sent again.
//
// # Errors
//
// Implementations classify failures so that callers can use errors.Is
// instead of matching text:
//
//   - [ErrNotFound]: the instance (or other object) does not exist, or no
//     longer does. Destroy treats it as success.
//   - [ErrAuth]: the key is missing, unknown, revoked, or lacks permission.
//   - [ErrOfferGone]: the offer was rented by someone else or withdrawn.
//   - [ErrRateLimited]: the server asked us to slow down (HTTP 429).
//   - [ErrOutcomeUnknown]: a mutating call may or may not have taken
//     effect (see [OutcomeUnknownError]); never retry it blindly.
//   - [ErrTransport]: no answer was read at all (see [TransportError]).
//
// Every HTTP-level failure is an [*APIError] carrying the status, the
// server's error slug and message; its Is method maps it onto the
// sentinels above.
package provider
