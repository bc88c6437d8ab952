package lifecycle

import (
	"os"

	"github.com/vastrun/vastrun/internal/redact"
)

// Sink is how a run writes files (evidence, state, receipts): through its
// Redactor, whatever the file (internal/archtest keeps it the only way).
func (e *Deps) Sink() redact.Sink { return redact.NewSink(e.Redactor) }

// writeFileAtomic writes b, masked, to path whole or not at all.
func (e *Deps) writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	return e.Sink().WriteFile(path, b, mode)
}
