// Package teamstate keeps vastrun's run state where a whole team can share it:
// a [Backend] is a flat store of small objects with conditional writes, and
// on top of it sit run leases with fencing ([Acquire]), a fenced run
// journal ([RunLog]), the conditional-write [Probe] and the team ledger.
//
// Backends: [Local] (a directory: one machine, today's default), [S3] (a
// bucket/prefix on any S3 endpoint that passes the probe; the bucket is
// authoritative) and [Memory] (in-process, for unit tests only). Package
// statetest is the conformance suite every Backend passes.
//
// Contracts:
//   - PutIfAbsent creates key only when it does not exist: of N racing
//     writers exactly one succeeds and the others get ErrPrecondition.
//   - PutIfMatch replaces key only when its current ETag equals etag; a
//     missing key or another ETag gets ErrPrecondition. ETags are opaque.
//   - Get of a missing key wraps ErrNotExist. Get reports the server's
//     clock (ServerTime) so that leases are judged by one clock for every
//     controller, never by the caller's.
//   - A lease is held until ServerTime passes its LastModified + TTL. Its
//     holder self-fences (stops side effects) once no renewal has succeeded
//     for TTL minus a margin measured on its own clock from the moment the
//     last successful renewal was sent, which is never later than the
//     server's LastModified; so a holder fences before anyone may take over.
//   - Every journal object is created with PutIfAbsent under the next
//     sequence number and carries the writer's lease generation; readers
//     drop records whose generation is lower than one already seen.
package teamstate
