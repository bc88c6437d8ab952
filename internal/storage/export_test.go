package storage

// SetBeforeChangeCheck makes PutFile call f after sending a file and before
// checking that it did not change; the returned func restores the default.
func SetBeforeChangeCheck(f func()) func() {
	beforeChangeCheck = f
	return func() { beforeChangeCheck = nil }
}

// RecvBudgetFree reports whether the whole receive budget is free, i.e. no
// download left a part buffer unreleased.
func RecvBudgetFree() bool {
	if !recvMem.TryAcquire(recvBudget) {
		return false
	}
	recvMem.Release(recvBudget)
	return true
}

// ForceRangedStreams makes every verified download (join) or none (!join)
// take ranged streams beside its head stream; the returned func restores
// the default rule.
func ForceRangedStreams(join bool) func() {
	old := joinRanged
	joinRanged = func(bool, int, int) bool { return join }
	return func() { joinRanged = old }
}

// JoinRanged is the default rule: does a stream with reads, short of
// them short, from a server on this machine or not, get ranged streams
// beside it?
var JoinRanged = joinRanged

// IsLoopback is the rule that tells an S3 endpoint on this machine.
var IsLoopback = isLoopback

// ChunksFree reports whether every receive chunk is back in the pool.
func ChunksFree() bool {
	if !chunkSem.TryAcquire(maxChunks) {
		return false
	}
	chunkSem.Release(maxChunks)
	return true
}

// HoldFree reports whether no stream holds a part's chunks (the whole hold
// budget is free).
func HoldFree() bool {
	if !holdSem.TryAcquire(holdBudget) {
		return false
	}
	holdSem.Release(holdBudget)
	return true
}

// HeldParts is how many parts streams have held for pairing so far.
func HeldParts() int64 { return heldParts.Load() }
