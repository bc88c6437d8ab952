package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/poll"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/receipt"
	"github.com/vastrun/vastrun/internal/remote"
	"github.com/vastrun/vastrun/internal/text"
)

// Check is one verification and its verdict.
// addCheck adds one check to the verify report.
func addCheck(r *receipt.VerifyReport, name string, ok bool, format string, args ...any) {
	r.Checks = append(r.Checks, receipt.Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
}

var cudaRE = regexp.MustCompile(`CUDA Version:\s*([0-9]+(?:\.[0-9]+)?)`)

// modelToken is the part of a Vast GPU name that nvidia-smi also prints:
// the first word with a digit ("4090", "A100", "T4", "A6000", "L40S").
func modelToken(vastName string) string {
	for _, f := range strings.Fields(strings.ToUpper(vastName)) {
		if strings.ContainsAny(f, "0123456789") {
			return f
		}
	}
	return strings.ToUpper(strings.TrimSpace(vastName))
}

func smiHasModel(smiName, vastName string) bool {
	tok := modelToken(vastName)
	for _, f := range strings.FieldsFunc(strings.ToUpper(smiName), func(r rune) bool { return r == ' ' || r == '-' || r == '_' }) {
		if f == tok {
			return true
		}
	}
	return false
}

// verify checks, before the test, that the instance is what was paid for:
// the exact image, the GPU model, count and VRAM, CUDA, and disk headroom.
// It is a no-op for an instance whose verify condition is already True (a
// resumed run re-attaching to the instance it verified before).
func verify(ctx context.Context, e *Scope, c *remote.Client, inst provider.Instance) error {
	return e.reconcileStep(stepVerify, inst.ID, func() error {
		t0 := e.Now()
		defer func() { e.timings.add("verify", e.Now().Sub(t0)) }()
		return verifyOnce(ctx, e, c, inst)
	})
}

// verifyProbe is what verify runs on the instance. It only reads, so it
// may run again after a dropped connection.
const verifyProbe = `echo "==csv"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits; echo "==smi"; nvidia-smi; echo "==df"; df -Pk . | tail -n 1`

// ErrNoAnswer means a probe of the instance got no answer over SSH: the
// connection dropped and redialling did not bring one back, or the
// instance stopped meanwhile. It is an error about reaching the instance,
// never a verdict on it (a verify check is judged only on what the probe
// printed).
var ErrNoAnswer = errors.New("no answer from the instance over SSH")

// probe runs verifyProbe until it answers. An answer is the probe having
// run (whatever its exit status: what it printed is judged). A transport
// failure (the client has already redialled) is asked again, on the
// run's clock, while the API says the instance runs and until the ready
// deadline; then it is an ErrNoAnswer StepError (a readiness failure,
// not verify_failed).
func probe(ctx context.Context, e *Scope, c *remote.Client, inst provider.Instance) (string, error) {
	var out, stopped string
	err := poll.Until(ctx, e.Clock, poll.Policy{Initial: time.Second, Max: 10 * time.Second, Jitter: e.jitter(), Deadline: e.Now().Add(e.readyDeadline()),
		Permanent: func(err error) bool {
			return stopped != "" || errors.Is(err, remote.ErrHostKeyChanged) || errors.Is(err, remote.ErrClosed)
		}},
		func(ctx context.Context) (bool, error) {
			o, err := c.Output(ctx, verifyProbe)
			var ee *remote.ExitError
			if err == nil || errors.As(err, &ee) {
				out = o
				return true, nil
			}
			e.Log.Debug("verify probe got no answer", "instance", inst.ID, "err", err)
			switch cur, aerr := e.Market.ShowInstance(ctx, inst.ID); {
			case errors.Is(aerr, provider.ErrNotFound):
				stopped = "the instance is gone"
			case aerr == nil && !cur.Running():
				stopped = "the instance is no longer running (" + text.OrDash(InterruptionReason(cur)) + ")"
			}
			return false, err
		})
	switch {
	case err == nil:
		return out, nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	case errors.Is(err, remote.ErrHostKeyChanged):
		return "", &StepError{Step: stepVerify, Instance: inst.ID, Outcome: OutcomeVerifyFailed, Err: err}
	case stopped != "":
		return "", &StepError{Step: stepVerify, Instance: inst.ID, Outcome: OutcomeReadyFailed, Err: fmt.Errorf("%w for the verify probe: %s: %w", ErrNoAnswer, stopped, err)}
	}
	return "", &StepError{Step: stepVerify, Instance: inst.ID, Outcome: OutcomeReadyFailed, Err: fmt.Errorf("%w for the verify probe before the ready deadline: %w", ErrNoAnswer, err)}
}

func verifyOnce(ctx context.Context, e *Scope, c *remote.Client, inst provider.Instance) error {
	out, err := probe(ctx, e, c, inst)
	if err != nil {
		return err
	}
	r := &receipt.VerifyReport{ImageUUID: inst.ImageUUID}
	e.verifyRep = r
	defer writeVerify(e)
	m := e.Frozen()
	p := m.Policy

	addCheck(r, "image", inst.ImageUUID == m.Image, "instance runs %q; manifest pins %q", inst.ImageUUID, m.Image)
	sections := splitSections(out)
	for _, line := range strings.Split(strings.TrimSpace(sections["csv"]), "\n") {
		parts := strings.Split(line, ",")
		if len(parts) < 3 {
			continue
		}
		mem, _ := strconv.Atoi(strings.TrimSpace(parts[1]))
		r.GPUs = append(r.GPUs, receipt.GPUInfo{Name: strings.TrimSpace(parts[0]), MemoryMiB: mem, Driver: strings.TrimSpace(parts[2])})
	}
	if len(r.GPUs) == 0 {
		addCheck(r, "gpu visible", false, "nvidia-smi listed no GPU")
	} else {
		addCheck(r, "gpu count", len(r.GPUs) == p.Count, "nvidia-smi lists %d GPUs; policy wants %d", len(r.GPUs), p.Count)
		for i, g := range r.GPUs {
			addCheck(r, fmt.Sprintf("gpu %d model", i), smiHasModel(g.Name, inst.GPUName), "nvidia-smi %q vs rented %q", g.Name, inst.GPUName)
			if p.MinVRAMGB > 0 {
				addCheck(r, fmt.Sprintf("gpu %d vram", i), float64(g.MemoryMiB) >= p.MinVRAMGB*1000, "%d MiB; policy wants %g GB", g.MemoryMiB, p.MinVRAMGB)
			}
		}
	}
	if m := cudaRE.FindStringSubmatch(sections["smi"]); m != nil {
		r.CUDA, _ = strconv.ParseFloat(m[1], 64)
		addCheck(r, "cuda", r.CUDA+1e-9 >= p.MinCUDA, "driver supports CUDA %.1f; policy wants >= %.1f", r.CUDA, p.MinCUDA)
	} else {
		addCheck(r, "cuda", false, "nvidia-smi printed no CUDA version")
	}
	if f := strings.Fields(sections["df"]); len(f) >= 4 {
		kb, _ := strconv.ParseFloat(f[3], 64)
		r.FreeDiskGB = kb / 1e6
	}
	minFree := e.Frozen().MinFreeDiskGB
	if minFree <= 0 {
		minFree = 1
	}
	addCheck(r, "disk headroom", r.FreeDiskGB >= minFree, "%.1f GB free; need %g GB", r.FreeDiskGB, minFree)

	var failed []string
	for _, ch := range r.Checks {
		if !ch.OK {
			failed = append(failed, ch.Name+": "+ch.Detail)
		}
	}
	if len(failed) > 0 {
		jerr := e.Record("failed", stepVerify, map[string]any{"instance_id": inst.ID, "checks": failed})
		outcome := OutcomeVerifyFailed
		if r.Checks[0].Name == "image" && !r.Checks[0].OK {
			outcome = OutcomeRemoteDiffers
		}
		return errors.Join(&StepError{Step: stepVerify, Instance: inst.ID, Outcome: outcome, Err: errors.New(strings.Join(failed, "; "))}, jerr)
	}
	e.Infof("verified instance %d: %s x%d, CUDA %.1f, %.0f GB free, image %s", inst.ID, r.GPUs[0].Name, len(r.GPUs), r.CUDA, r.FreeDiskGB, shortImage(inst.ImageUUID))
	return e.Record("done", stepVerify, map[string]any{"instance_id": inst.ID})
}

func shortImage(s string) string {
	if i := strings.Index(s, "@sha256:"); i >= 0 && len(s) > i+20 {
		return s[:i+20] + "…"
	}
	return s
}

func splitSections(out string) map[string]string {
	m := map[string]string{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "==") {
			cur = strings.TrimPrefix(line, "==")
			continue
		}
		m[cur] += line + "\n"
	}
	return m
}

func writeVerify(e *Scope) {
	if e.verifyRep == nil {
		return
	}
	b, _ := json.MarshalIndent(e.verifyRep, "", "  ")
	e.Sink().WriteJSON(filepath.Join(e.EvidenceDir, "verify.json"), append(b, '\n'), 0o644) //nolint:errcheck // the receipt holds the same report; this copy is for reading alone
}
