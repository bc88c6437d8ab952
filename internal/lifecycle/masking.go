package lifecycle

import (
	"encoding/json"
)

// maskedData is data as the journal will hold it: when its JSON form
// carries a secret in any form, the masked document (masked after
// decoding, so it stays valid JSON); otherwise data itself.
func (e *Run) maskedData(data any) any {
	if data == nil || e.Redactor == nil {
		return data
	}
	b, err := json.Marshal(data)
	if err != nil || !e.Redactor.Contains(b) {
		return data
	}
	return json.RawMessage(e.Redactor.JSON(b))
}

// maskResult masks a test's result file after decoding: each string in it,
// keys included. Bytes that are not JSON are masked as text.
func (e *Run) maskResult(b []byte) []byte {
	return e.Redactor.JSON(b)
}
