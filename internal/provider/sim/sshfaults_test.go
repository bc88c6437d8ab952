package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vastrun/vastrun/internal/provider/sim"
)

// ssh_drop and ssh_stall are armed over POST /_sim/faults like every other
// fault; a named instance must exist, and the state counts what acted.
func TestSSHFaultsOverTheControlEndpoint(t *testing.T) {
	e := newEnv(t, sim.Config{})
	_, id := rent(t, e, "sshfault")
	defer e.client.DestroyInstance(context.Background(), id)
	e.clk.Advance(time.Minute)
	post := func(body string) int {
		res, err := http.Post(e.srv.URL+"/_sim/faults", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, body := range []string{
		fmt.Sprintf(`{"kind":"ssh_drop","instance":%d}`, id),
		fmt.Sprintf(`{"kind":"ssh_stall","instance":%d}`, id),
		`{"kind":"ssh_drop","seconds":30,"count":3}`,
	} {
		if code := post(body); code != 200 {
			t.Fatalf("%s: status %d", body, code)
		}
	}
	if code := post(`{"kind":"ssh_drop","instance":99999999}`); code != 400 {
		t.Fatalf("an ssh fault for a missing instance: status %d", code)
	}
	_, _, body := get(t, e.srv.URL+"/_sim/state", nil)
	var st sim.State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	// Both immediate faults acted, once each, on an instance with no
	// connection open (they act on what is open: nothing here).
	if st.SSHFaultsFired != 2 {
		t.Fatalf("ssh faults fired: %d, want 2", st.SSHFaultsFired)
	}
}
