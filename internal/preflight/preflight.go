// Package preflight checks everything checkable before anything is
// created: no run directory, receipt or rental exists until it passes.
//
// Local checks (the image reference and its digest, upload paths, declared
// secrets, that none of vastrun's own keys is handed to the workload, the
// variables the store URIs name) need nothing but the config and the
// environment. Store checks (stores.go) probe every store the run writes
// to with the credentials that will write it. Market checks
// ask the marketplace's free offer search whether the policy's GPU names
// exist (with a did-you-mean) and how many live offers meet the policy;
// for none, they name the constraint that removed the last ones. A market
// check that cannot reach the API is reported, never fatal: the run's own
// search retries and classifies that failure.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/vastrun/vastrun/internal/config"
	"github.com/vastrun/vastrun/internal/policy"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/redact"
	"github.com/vastrun/vastrun/internal/text"
)

// Problem is one thing wrong, with the field, its value and the fix.
type Problem struct {
	Field string `json:"field"`
	Value string `json:"value"`
	What  string `json:"problem"`
	Fix   string `json:"fix"`
}

func (p Problem) String() string {
	if p.Value == "" {
		return fmt.Sprintf("%s: %s", p.Field, p.What)
	}
	return fmt.Sprintf("%s %s: %s", p.Field, p.Value, p.What)
}

// Error holds every problem the preflight found. Nothing was created.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "preflight: " + strings.Join(parts, "; ")
}

// Fixes are the hint lines, one per problem.
func (e *Error) Fixes() []string {
	var out []string
	for _, p := range e.Problems {
		if p.Fix != "" {
			out = append(out, p.Field+": "+p.Fix)
		}
	}
	return out
}

// Input is what the preflight judges.
type Input struct {
	Config  *config.Config
	RepoDir string // upload paths are relative to it
	Getenv  func(string) string
	// Workflow is ci, up, train or canary: train has no upload/test step
	// ("" for validate: every section the config has).
	Workflow string
	// OwnKeys are the keys vastrun itself holds (the Vast API key from
	// wherever it is read, the storage credentials of team state): never
	// a workload's, by name under secrets: or by value under secrets: or
	// env:.
	OwnKeys []OwnKey
	// AgentEnv is what the agent on the instance gets of vastrun's
	// environment for the checkpoint store (its credentials): Stores
	// probes the training stores with exactly these.
	AgentEnv map[string]string
}

// OwnKey is a key vastrun holds: Name is the variable it is read from
// (empty for a file), Source says where it comes from, for people.
type OwnKey struct {
	Name, Source, Value string
}

// Local runs the checks that need no network.
func Local(in Input) error {
	var ps []Problem
	ps = append(ps, checkImage(in.Config.Image)...)
	ps = append(ps, checkUploads(in)...) // uploads.go
	ps = append(ps, checkWorkdir(in)...) // workdir.go
	ps = append(ps, checkVars(in)...)    // stores.go
	for _, d := range []struct{ field, path string }{{"state_dir", in.Config.StateDir}, {"evidence_dir", in.Config.EvidenceDir}} {
		if d.path == "" {
			continue
		}
		st, err := os.Stat(d.path)
		switch {
		case err == nil && !st.IsDir():
			ps = append(ps, Problem{Field: d.field, Value: fmt.Sprintf("%q", d.path), What: "is a file, not a directory", Fix: "point it at a directory (vastrun creates it), or move the file away"})
		case err != nil && !errors.Is(err, os.ErrNotExist):
			ps = append(ps, Problem{Field: d.field, Value: fmt.Sprintf("%q", d.path), What: "cannot be used: " + err.Error(), Fix: "point it at a directory vastrun may create and write"})
		}
	}
	ps = append(ps, checkOwnKeys(in)...)
	for _, name := range in.Config.Secrets {
		v := in.Getenv(name)
		switch {
		case ownKey(in, name, v) != nil:
			// Refused above; its other problems do not matter.
		case v == "":
			ps = append(ps, Problem{Field: "secrets", Value: name, What: "is declared but not set in the environment",
				Fix: fmt.Sprintf("export %s (in CI: add it as a masked secret), or remove it from secrets:", name)})
		case len(v) < redact.MinSecretLen:
			ps = append(ps, Problem{Field: "secrets", Value: name, What: fmt.Sprintf("is %d bytes; a secret under %d bytes cannot be masked without masking ordinary text", len(v), redact.MinSecretLen),
				Fix: fmt.Sprintf("use a secret of at least %d bytes, or pass it as env: if it is not secret", redact.MinSecretLen)})
		case redact.Unmaskable(v):
			ps = append(ps, Problem{Field: "secrets", Value: name, What: "spans lines that are all under 4 bytes; output is masked line by line, and lines that short cannot be masked without masking ordinary text",
				Fix: "put the secret on one line (for example base64-encode it and decode it in the workload)"})
		}
	}
	if len(ps) > 0 {
		return &Error{Problems: ps}
	}
	return nil
}

// ownKeyFix is the way out of handing the workload one of vastrun's keys.
const ownKeyFix = "give the workload a scoped key of its own, under another name (the instance already has its own CONTAINER_API_KEY, scoped to itself)"

// ownKey is the key of vastrun's that the variable name with value v is,
// or nil.
func ownKey(in Input, name, v string) *OwnKey {
	for i, k := range in.OwnKeys {
		if (name != "" && k.Name == name) || (k.Value != "" && strings.TrimSpace(v) == k.Value) {
			return &in.OwnKeys[i]
		}
	}
	return nil
}

// checkOwnKeys refuses vastrun's own keys as workload secrets or env
// values: the account key controls every instance and the team state's
// credentials every run's record, so neither may reach an instance (nor a
// log on it that prints it in hex).
func checkOwnKeys(in Input) []Problem {
	var ps []Problem
	for _, name := range in.Config.Secrets {
		if k := ownKey(in, name, in.Getenv(name)); k != nil {
			ps = append(ps, Problem{Field: "secrets", Value: name, What: "is vastrun's own key (" + k.Source + "), which never reaches the instance", Fix: ownKeyFix})
		}
	}
	names := make([]string, 0, len(in.Config.Env))
	for name := range in.Config.Env {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if k := ownKey(in, "", in.Config.Env[name]); k != nil {
			ps = append(ps, Problem{Field: "env", Value: name, What: "holds vastrun's own key (" + k.Source + "), which never reaches the instance", Fix: ownKeyFix})
		}
	}
	return ps
}

var hex64 = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-f0-9]{64}$`) })

// checkImage parses the reference and insists on a well-formed digest.
func checkImage(ref string) []Problem {
	field, val := "image", fmt.Sprintf("%q", ref)
	if i := strings.LastIndex(ref, "@"); i >= 0 {
		algo, hexPart, ok := strings.Cut(ref[i+1:], ":")
		switch {
		case !ok || algo != "sha256":
			return []Problem{{Field: field, Value: val, What: "the digest must be sha256:<64 hex characters>", Fix: "copy the digest from: crane digest IMAGE (or docker buildx imagetools inspect IMAGE)"}}
		case !hex64().MatchString(hexPart):
			return []Problem{{Field: field, Value: val, What: fmt.Sprintf("a sha256 digest is 64 lowercase hex characters; this one has %d", len(hexPart)),
				Fix: "copy the whole digest from: crane digest IMAGE (or docker buildx imagetools inspect IMAGE)"}}
		}
		if _, err := name.NewDigest(ref); err != nil {
			return []Problem{{Field: field, Value: val, What: "is not a valid image reference: " + err.Error(), Fix: "write it as registry/repository@sha256:<digest>"}}
		}
		return nil
	}
	// Weak validation: a Docker Hub name without a registry is valid.
	if _, err := name.ParseReference(ref); err != nil {
		return []Problem{{Field: field, Value: val, What: "is not a valid image reference: " + err.Error(), Fix: "write it as registry/repository@sha256:<digest>"}}
	}
	return []Problem{{Field: field, Value: val, What: "is not pinned: a tag can change under you", Fix: "pin it by digest, repo@sha256:<digest>; find it with: crane digest IMAGE (or docker buildx imagetools inspect IMAGE)"}}
}

// MarketReport is what the live marketplace says about the policy.
type MarketReport struct {
	Seen     int            `json:"offers_seen"`
	Matching int            `json:"offers_matching"`
	Cheapest float64        `json:"cheapest_dph,omitempty"`
	Funnel   []policy.Stage `json:"funnel"`
	// Removed names the constraint that took the count to zero.
	Removed string `json:"removed_by,omitempty"`
	// Unknown are policy models no offer carries, with suggestions.
	Unknown []Unknown `json:"unknown_models,omitempty"`
}

// Unknown is a policy model no offer carries.
type Unknown struct {
	Model      string `json:"model"`
	DidYouMean string `json:"did_you_mean,omitempty"` // the best of Suggestions
	// Suggestions are the models on offer it most likely meant, best
	// first: its family ("H100" → "H100 NVL", "H100 SXM") before names a
	// few edits away.
	Suggestions []string `json:"suggestions,omitempty"`
}

// catalogLimit bounds the name search: enough to see every model on offer.
const catalogLimit = 1000

// Market checks the policy against the live offers. It returns a *Error
// when no policy model exists on the marketplace at all (a config typo);
// zero matching offers is reported, not an error: the market moves.
func Market(ctx context.Context, m provider.OfferSearcher, cfg *config.Config) (*MarketReport, error) {
	p := cfg.Policy()
	rep := &MarketReport{Funnel: []policy.Stage{}} // a list, [] until the search runs
	if len(p.Models) > 0 {
		all, err := m.SearchOffers(ctx, provider.Query{"rentable": map[string]any{"eq": true}, "external": map[string]any{"eq": false}, "limit": catalogLimit})
		if err != nil {
			return nil, fmt.Errorf("preflight: search offers for GPU names: %w", err)
		}
		known := map[string]bool{}
		for _, o := range all {
			known[strings.ToLower(o.GPUName)] = true
		}
		names := make([]string, 0, len(known))
		for _, o := range all {
			if known[strings.ToLower(o.GPUName)] {
				names = append(names, o.GPUName)
				delete(known, strings.ToLower(o.GPUName))
			}
		}
		sort.Strings(names)
		for _, model := range p.Models {
			if !containsFold(names, model) {
				u := Unknown{Model: model, Suggestions: text.Suggest(model, names, 3)}
				if len(u.Suggestions) > 0 {
					u.DidYouMean = u.Suggestions[0]
				}
				rep.Unknown = append(rep.Unknown, u)
			}
		}
		if len(rep.Unknown) == len(p.Models) && len(names) > 0 {
			var ps []Problem
			for _, u := range rep.Unknown {
				fix := "write a GPU name as Vast spells it (list them: vastrun offers)"
				if len(u.Suggestions) > 0 {
					quoted, written := make([]string, len(u.Suggestions)), make([]string, len(u.Suggestions))
					for i, n := range u.Suggestions {
						quoted[i], written[i] = fmt.Sprintf("%q", n), strings.ReplaceAll(n, " ", "_")
					}
					fix = fmt.Sprintf("did you mean %s? (write it as %s)", text.OneOf(quoted), text.OneOf(written))
				}
				ps = append(ps, Problem{Field: "gpu.models", Value: fmt.Sprintf("%q", strings.ReplaceAll(u.Model, " ", "_")),
					What: fmt.Sprintf("no offer on the marketplace is a %q (%d models on offer now)", u.Model, len(names)), Fix: fix})
			}
			return rep, &Error{Problems: ps}
		}
	}
	offers, err := m.SearchOffers(ctx, p.LooseQuery(500))
	if err != nil {
		return nil, fmt.Errorf("preflight: search offers: %w", err)
	}
	rep.Seen = len(offers)
	rep.Funnel = policy.Funnel(p, offers)
	rep.Matching = rep.Funnel[len(rep.Funnel)-1].Left
	rep.Removed = policy.RemovedBy(rep.Funnel)
	if chosen, _ := policy.Select(p, offers); chosen != nil {
		rep.Cheapest = p.Price(*chosen)
	}
	if perr := checkMaxBid(cfg, offers); perr != nil {
		return rep, perr
	}
	return rep, nil
}

// Explain is one line about the report, for people.
func (r *MarketReport) Explain() string {
	if r.Matching > 0 {
		return fmt.Sprintf("%d of %d offers meet the policy; the cheapest costs $%.4f/h", r.Matching, r.Seen, r.Cheapest)
	}
	if r.Seen == 0 {
		return "no live offer has the policy's GPU model and count"
	}
	return fmt.Sprintf("none of %d offers meets the policy: %s removed the last ones", r.Seen, r.Removed)
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}
