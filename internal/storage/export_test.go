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
