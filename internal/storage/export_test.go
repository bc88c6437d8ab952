package storage

// SetBeforeChangeCheck makes PutFile call f after sending a file and before
// checking that it did not change; the returned func restores the default.
func SetBeforeChangeCheck(f func()) func() {
	beforeChangeCheck = f
	return func() { beforeChangeCheck = nil }
}
