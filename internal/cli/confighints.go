package cli

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/text"
)

// configError is a config file that could not be read, as a usage error
// whose hint is the fix for that file: the command that writes one, the
// key it meant, the kind of value its key takes.
func configError(path string, err error) error {
	var ke *config.KeyError
	var te *config.TypeError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &UsageError{Err: fmt.Errorf("config file %s: %w", path, fs.ErrNotExist),
			Hint: "write one with 'vastrun init' ('vastrun init train' for a training run), or pass -f FILE"}
	case errors.As(err, &ke) && len(ke.DidYouMean) > 0:
		return &UsageError{Err: err, Hint: fmt.Sprintf("rename %s: to %s: at line %d of %s (docs/config.md lists every key)",
			ke.Key, text.OneOf(ke.DidYouMean), ke.Line, path)}
	case errors.As(err, &ke):
		return &UsageError{Err: err, Hint: fmt.Sprintf("remove %s: at line %d of %s, or write one of the allowed keys (docs/config.md lists every key)", ke.Key, ke.Line, path)}
	case errors.As(err, &te) && te.Key != "":
		return &UsageError{Err: err, Hint: fmt.Sprintf("write %s as %s at line %d of %s (docs/config.md gives each key's type)", te.Key, te.Want, te.Line, path)}
	}
	return &UsageError{Err: err, Hint: fmt.Sprintf("fix it in %s; docs/config.md lists every key, its type and its range", path)}
}
