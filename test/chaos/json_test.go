package chaos

import (
	"encoding/json"

	"github.com/vastrun/vastrun/internal/provider/sim"
)

func jsonFault(f sim.Fault) (string, error) {
	b, err := json.Marshal(f)
	return string(b), err
}
