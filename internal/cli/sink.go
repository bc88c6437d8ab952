package cli

import (
	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/redact"
)

// sink is how the CLI writes a file: through the process's redactor, which
// knows the key in use, the storage credentials and, given a config, its
// declared secrets (masked whether or not a run registered them first).
func (f *Factory) sink(cfg *config.Config) redact.Sink {
	red := f.IO.Redactor()
	red.Add(f.KeyForMasking())
	for _, k := range credentialVars {
		red.Add(f.Getenv(k))
	}
	if cfg != nil {
		for _, name := range cfg.Secrets {
			red.Add(f.Getenv(name))
		}
	}
	return redact.NewSink(red)
}
