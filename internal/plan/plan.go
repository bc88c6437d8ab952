// Package plan is a saved plan: what `vastrun plan` found before anything
// was rented — the inputs the run is bound to (commit, image digest,
// configuration hash, the spec it would freeze), the offer with the
// alternatives and their prices, the price ceiling, the worst case and the
// budget — as one versioned JSON document (Schema) whose SHA-256 is its
// identity, printed and written in the document itself.
//
// `vastrun apply` runs exactly that plan: [Read] refuses a document whose
// hash does not match its content, [Plan.CheckFresh] one older than its
// TTL, [Plan.CheckInputs] one whose inputs changed (naming the fields),
// [Plan.Admit] a rental above its ceiling or worst case. Every refusal is
// a *RefusedError (errors.Is ErrRefused). The hash binds an approval to
// the content; it is not a signature: who may approve is the threat
// model's business (docs/approval.md), not this package's.
package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/vastrun/vastrun/internal/spec"
)

// Schema is the saved plan's versioned name (docs/json.md).
const Schema = "vastrun.plan/v1"

// DefaultTTL is how long a plan may be applied after it was made, unless
// `plan --ttl` says otherwise; MaxTTL bounds what it may say.
const (
	DefaultTTL = time.Hour
	MaxTTL     = 7 * 24 * time.Hour
)

// Plan is the saved plan (docs/json.md, vastrun.plan/v1).
type Plan struct {
	Schema string `json:"schema"`
	// SHA256 is the plan's identity: the SHA-256 of its canonical JSON
	// with this field empty (see Seal).
	SHA256    string    `json:"sha256"`
	Workflow  string    `json:"workflow"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Marketplace is the API the plan searched: its base URL, or
	// "embedded simulator" under --sim. A plan applies only there.
	Marketplace string `json:"marketplace"`
	Simulated   bool   `json:"simulated"`
	Inputs      Inputs `json:"inputs"`
	// Gate is "passed", "none" (the config has no gate:) or "skipped"
	// (plan --skip-gate).
	Gate         string   `json:"gate"`
	Offer        Offer    `json:"offer"`
	Alternatives []Offer  `json:"alternatives"`
	Limits       Limits   `json:"limits"`
	LabelPrefix  string   `json:"label_prefix"`
	Notes        []string `json:"notes,omitempty"` // e.g. an interruptible rental's bid
	// Manifest is the spec the run will freeze, without the run's own
	// facts (run id, label, CI run, evidence directory, creation time).
	Manifest spec.Manifest `json:"manifest"`
}

// Inputs are what the plan is bound to: a run whose inputs differ is not
// the planned run.
type Inputs struct {
	Commit         string `json:"commit"`
	Image          string `json:"image"`
	ConfigFile     string `json:"config_file"`
	ConfigSHA256   string `json:"config_sha256"`
	ManifestSHA256 string `json:"manifest_sha256"`
}

// Offer is an offer as the plan shows it.
type Offer struct {
	ID          int64   `json:"id"`
	MachineID   int64   `json:"machine_id"`
	GPUName     string  `json:"gpu_name"`
	NumGPUs     int     `json:"num_gpus"`
	Geolocation string  `json:"geolocation,omitempty"`
	Reliability float64 `json:"reliability"`
	// DPHTotal is what the rental costs an hour, storage for the disk
	// (and for a bid, the bid) included.
	DPHTotal float64 `json:"dph_total"`
}

// Limits are the money the plan approves.
type Limits struct {
	DiskGB float64 `json:"disk_gb"`
	// CeilingDPH is the most an hour of any rental the plan covers may
	// cost: should another renter take the offer first, a replacement
	// meeting the same policy is rented only up to it.
	CeilingDPH float64 `json:"ceiling_dph"`
	// WorstCaseUSD is the spend at the offer's price if every deadline is
	// used to the full; CeilingWorstCaseUSD the same at the ceiling, the
	// most the plan may spend.
	WorstCaseUSD        float64 `json:"worst_case_usd"`
	CeilingWorstCaseUSD float64 `json:"ceiling_worst_case_usd"`
	BudgetUSD           float64 `json:"budget_usd"`
	// SpendBound says in words what bounds the money (training: the
	// budget kill switch).
	SpendBound string `json:"spend_bound"`
}

// ErrRefused means a plan cannot be applied; the *RefusedError says why.
var ErrRefused = errors.New("the saved plan cannot be applied")

// Reason classifies a refusal.
type Reason string

// The refusals.
const (
	Damaged        Reason = "damaged"         // not a plan, or its hash does not match its content
	WrongHash      Reason = "wrong_hash"      // not the plan that was approved (apply --sha256)
	Expired        Reason = "expired"         // older than its TTL
	InputsChanged  Reason = "inputs_changed"  // commit, image, configuration or spec differ
	OverCeiling    Reason = "over_ceiling"    // the rental would cost more an hour than the ceiling
	OverWorstCase  Reason = "over_worst_case" // the rental's worst case is above the plan's
	WrongWorkflow  Reason = "wrong_workflow"  // applied as another workflow
	WrongMarket    Reason = "wrong_market"    // applied against another marketplace
	NothingApplies Reason = "nothing_applies" // no plan was given
)

// RefusedError is a refusal of a plan, with the fields that differ.
type RefusedError struct {
	SHA256 string
	Reason Reason
	Fields []string // InputsChanged: the inputs and spec fields that differ
	Detail string
}

func (e *RefusedError) Error() string {
	s := fmt.Sprintf("plan %s refused (%s): %s", short(e.SHA256), e.Reason, e.Detail)
	if len(e.Fields) > 0 {
		s += ": " + strings.Join(e.Fields, ", ")
	}
	return s
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return "-"
	}
	return h
}

// Short is the first 12 hex digits of the plan's hash, for people.
func (p *Plan) Short() string { return short(p.SHA256) }

// canonical is the JSON the hash covers: the plan with SHA256 empty,
// indented as the file is.
func (p *Plan) canonical() ([]byte, error) {
	c := *p
	c.SHA256 = ""
	return json.MarshalIndent(&c, "", "  ")
}

// Seal computes the plan's hash and sets SHA256.
func (p *Plan) Seal() error {
	b, err := p.canonical()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	p.SHA256 = hex.EncodeToString(sum[:])
	return nil
}

// Marshal is the sealed plan's file content.
func (p *Plan) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Parse reads a plan and checks that its hash matches its content. A
// field the schema does not know is refused, not ignored: it would not be
// covered by what was approved.
func Parse(b []byte) (*Plan, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, &RefusedError{Reason: Damaged, Detail: fmt.Sprintf("not a %s document: %v", Schema, err)}
	}
	if p.Schema != Schema {
		return nil, &RefusedError{SHA256: p.SHA256, Reason: Damaged, Detail: fmt.Sprintf("schema %q is not %s", p.Schema, Schema)}
	}
	stated := p.SHA256
	if err := p.Seal(); err != nil {
		return nil, err
	}
	if stated != p.SHA256 {
		return nil, &RefusedError{SHA256: stated, Reason: Damaged, Detail: fmt.Sprintf("its content hashes to %s, not the %s it states: it was edited or damaged", p.SHA256, text(stated))}
	}
	return &p, nil
}

func text(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// Read reads and checks the plan in path.
func Read(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	p, err := Parse(b)
	var re *RefusedError
	if errors.As(err, &re) {
		re.Detail = path + ": " + re.Detail
	}
	return p, err
}

// CheckHash refuses a plan that is not the one approved (want: the
// approved hash, "" when none was named).
func (p *Plan) CheckHash(want string) error {
	if want == "" || strings.EqualFold(want, p.SHA256) {
		return nil
	}
	return &RefusedError{SHA256: p.SHA256, Reason: WrongHash, Detail: fmt.Sprintf("its hash is %s, not the approved %s", p.SHA256, want)}
}

// skew is how far ahead of this machine's clock another machine's may be
// when it makes a plan.
const skew = 5 * time.Minute

// CheckFresh refuses a plan older than its TTL at now, and one whose
// dates no vastrun writes (made in the future, valid longer than MaxTTL).
func (p *Plan) CheckFresh(now time.Time) error {
	switch ttl := p.ExpiresAt.Sub(p.CreatedAt); {
	case p.CreatedAt.After(now.Add(skew)):
		return &RefusedError{SHA256: p.SHA256, Reason: Expired, Detail: fmt.Sprintf("it says it was made at %s, in the future (this clock: %s)",
			p.CreatedAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
	case ttl <= 0 || ttl > MaxTTL:
		return &RefusedError{SHA256: p.SHA256, Reason: Expired, Detail: fmt.Sprintf("it is valid for %s; a plan is valid for up to %s", ttl, MaxTTL)}
	case now.Before(p.ExpiresAt):
		return nil
	}
	return &RefusedError{SHA256: p.SHA256, Reason: Expired, Detail: fmt.Sprintf("it expired at %s (made %s, valid for %s); offers and prices move: make a new plan",
		p.ExpiresAt.UTC().Format(time.RFC3339), p.CreatedAt.UTC().Format(time.RFC3339), p.ExpiresAt.Sub(p.CreatedAt))}
}

// CheckInputs refuses a plan whose inputs differ from now's: the commit,
// the configuration file's hash, and every field of the spec the run
// would freeze (the image and its digest among them), each named.
func (p *Plan) CheckInputs(now Inputs, draft spec.Manifest) error {
	var fields []string
	if p.Inputs.Commit != now.Commit {
		fields = append(fields, "commit")
	}
	if p.Inputs.Image != now.Image {
		fields = append(fields, "image")
	}
	for _, f := range spec.Diff(p.Manifest, draft) {
		if f != "image" {
			fields = append(fields, f)
		}
	}
	if len(fields) == 0 && p.Inputs.ConfigSHA256 != now.ConfigSHA256 {
		// Only the file changed (a comment, an unused key): still not the
		// file the plan was made from.
		fields = append(fields, "config_sha256")
	}
	if len(fields) == 0 && p.Inputs.ManifestSHA256 != now.ManifestSHA256 {
		fields = append(fields, "manifest_sha256")
	}
	if len(fields) == 0 {
		return nil
	}
	return &RefusedError{SHA256: p.SHA256, Reason: InputsChanged, Fields: fields,
		Detail: fmt.Sprintf("what it was made from changed since (%s)", p.Inputs.ConfigFile)}
}

// CheckRun refuses a run whose frozen commit or image is not the plan's
// (the configuration is read once, before the run; the commit is read
// again when the run freezes its manifest).
func (p *Plan) CheckRun(commit, image string) error {
	var fields []string
	if commit != p.Inputs.Commit {
		fields = append(fields, "commit")
	}
	if image != p.Inputs.Image {
		fields = append(fields, "image")
	}
	if len(fields) == 0 {
		return nil
	}
	return &RefusedError{SHA256: p.SHA256, Reason: InputsChanged, Fields: fields, Detail: "the run froze other inputs than the plan's"}
}

// tolerance absorbs float noise in prices recomputed from the same offer.
const tolerance = 1e-9

// Admit refuses a rental at dph ($/h, storage included) whose worst case
// is worstCase, when either is above what the plan approved.
func (p *Plan) Admit(offer int64, dph, worstCase float64) error {
	if dph > p.Limits.CeilingDPH+tolerance {
		return &RefusedError{SHA256: p.SHA256, Reason: OverCeiling, Detail: fmt.Sprintf(
			"offer %d costs $%.4f/h, above the plan's ceiling $%.4f/h (planned: offer %d at $%.4f/h); no offer meeting the policy is left within it",
			offer, dph, p.Limits.CeilingDPH, p.Offer.ID, p.Offer.DPHTotal)}
	}
	bound := max(p.Limits.CeilingWorstCaseUSD, p.Limits.WorstCaseUSD)
	if worstCase > bound+tolerance {
		return &RefusedError{SHA256: p.SHA256, Reason: OverWorstCase, Detail: fmt.Sprintf(
			"renting offer %d has a worst case of $%.4f, above the plan's $%.4f", offer, worstCase, bound)}
	}
	return nil
}

// Summary is the plan in a few lines for people: what the operator
// approves at the prompt, in an MCP elicitation or a CI job summary.
func (p *Plan) Summary() []string {
	o := p.Offer
	lines := []string{
		fmt.Sprintf("plan %s (%s)", p.SHA256, p.Workflow),
		fmt.Sprintf("rent offer %d: %s x%d on machine %d (%s), $%.4f/h with %g GB disk", o.ID, o.GPUName, o.NumGPUs, o.MachineID, dashed(o.Geolocation), o.DPHTotal, p.Limits.DiskGB),
		p.Limits.SpendBound,
		fmt.Sprintf("ceiling $%.4f/h: a replacement for a taken offer is rented only within the policy and up to it (worst case then $%.4f)", p.Limits.CeilingDPH, max(p.Limits.CeilingWorstCaseUSD, p.Limits.WorstCaseUSD)),
	}
	if len(p.Alternatives) > 0 {
		var alts []string
		for i, a := range p.Alternatives {
			if i == 5 {
				alts = append(alts, fmt.Sprintf("and %d more", len(p.Alternatives)-i))
				break
			}
			alts = append(alts, fmt.Sprintf("%d %s x%d $%.4f/h", a.ID, a.GPUName, a.NumGPUs, a.DPHTotal))
		}
		lines = append(lines, "alternatives meeting the policy: "+strings.Join(alts, "; "))
	}
	lines = append(lines, p.Notes...)
	lines = append(lines,
		fmt.Sprintf("image %s; commit %s; test %s", p.Inputs.Image, p.Inputs.Commit, dashed(p.Manifest.Test)),
		fmt.Sprintf("gate %s; label prefix %s; %s", p.Gate, p.LabelPrefix, where(p)),
		fmt.Sprintf("valid until %s", p.ExpiresAt.UTC().Format(time.RFC3339)))
	return lines
}

func where(p *Plan) string {
	if p.Simulated {
		return "simulated: nothing real is rented"
	}
	return "marketplace " + p.Marketplace
}

func dashed(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
