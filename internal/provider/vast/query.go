package vast

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/text"
)

// QueryOptions are the search settings that sit beside the filter text, as
// the official CLI's flags do.
type QueryOptions struct {
	// Order is the CLI's -o syntax: "dph_total,num_gpus-" (trailing "-" is
	// descending). Empty means "score-".
	Order string
	// Type is on-demand (default), bid (alias interruptible) or reserved.
	Type string
	// Limit caps the number of offers returned; 0 sends no limit.
	Limit int
	// StorageGB prices storage into dph_total (allocated_storage); 0 means 5.
	StorageGB float64
	// NoDefaults drops the default filters (verified, external, rentable, rented).
	NoDefaults bool
}

// QueryError names the token of a query that could not be parsed.
type QueryError struct {
	Token  string
	Reason string
	Hint   string
}

func (e *QueryError) Error() string {
	s := fmt.Sprintf("bad query at %q: %s", e.Token, e.Reason)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// queryFields are the filter names the official CLI knows, plus the few the
// vendor docs and orchestrators also send (os_version, reliability2, score,
// hosting_type).
var queryFields = []string{
	"bw_nvlink", "compute_cap", "cpu_arch", "cpu_cores", "cpu_cores_effective", "cpu_ghz",
	"cpu_ram", "cuda_max_good", "datacenter", "direct_port_count", "driver_version", "disk_bw",
	"disk_space", "dlperf", "dlperf_per_dphtotal", "dph_total", "duration", "external",
	"flops_per_dphtotal", "gpu_arch", "gpu_display_active", "gpu_frac", "gpu_mem_bw", "gpu_name",
	"gpu_ram", "gpu_total_ram", "gpu_max_power", "gpu_max_temp", "has_avx", "host_id", "id",
	"inet_down", "inet_down_cost", "inet_up", "inet_up_cost", "machine_id", "min_bid", "mobo_name",
	"num_gpus", "pci_gen", "pcie_bw", "reliability", "rentable", "rented", "storage_cost",
	"static_ip", "total_flops", "ubuntu_version", "verification", "verified", "vms_enabled",
	"geolocation", "cluster_id", "os_version", "reliability2", "score", "hosting_type", "dph_base",
}

var fieldAliases = map[string]string{
	"cuda_vers":      "cuda_max_good",
	"display_active": "gpu_display_active",
	"dlperf_usd":     "dlperf_per_dphtotal",
	"dph":            "dph_total",
	"flops_usd":      "flops_per_dphtotal",
}

// GB→MB uses 1000, as the official CLI does; days→seconds for duration.
var fieldMultipliers = map[string]float64{
	"cpu_ram":       1000,
	"gpu_ram":       1000,
	"gpu_total_ram": 1000,
	"duration":      86400,
}

var symbolicOps = map[string]string{
	"=": "eq", "==": "eq", "!=": "neq", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte",
}

// Word operators, longest first so "not in" wins over "notin"-less prefixes.
var wordOps = []struct{ word, op string }{
	{"not eq", "neq"}, {"not in", "notin"}, {"noteq", "neq"}, {"notin", "notin"},
	{"neq", "neq"}, {"nin", "notin"}, {"gte", "gte"}, {"lte", "lte"},
	{"eq", "eq"}, {"gt", "gt"}, {"lt", "lt"}, {"in", "in"},
}

func allowedOps() string {
	return "=, ==, !=, >, >=, <, <=, eq, neq, gt, gte, lt, lte, in, notin"
}

func isKnownField(f string) bool {
	for _, k := range queryFields {
		if k == f {
			return true
		}
	}
	return false
}

// AllowedQueryFields lists the filter names ParseQuery accepts, sorted.
func AllowedQueryFields() []string {
	out := append([]string(nil), queryFields...)
	for a := range fieldAliases {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// ParseQuery turns the official CLI's query syntax, for example
//
//	gpu_name=RTX_4090 num_gpus>=2 reliability>0.98 dph<0.6 geolocation in [US,CA]
//
// into the JSON document the official CLI sends to POST /api/v0/bundles/:
// aliases resolved, "_" turned into spaces, RAM in GB multiplied by 1000,
// duration in days turned into seconds, true/false/null typed and every
// other value left a string (the server coerces numeric strings), default
// filters added, order/type/allocated_storage/limit set.
//
// Unlike the official CLI, which only warns, an unknown field is an error:
// a typo in a price ceiling must not silently widen a search that spends money.
func ParseQuery(text string, opts QueryOptions) (provider.Query, error) {
	q := provider.Query{}
	if !opts.NoDefaults {
		q["verified"] = map[string]any{"eq": true}
		q["external"] = map[string]any{"eq": false}
		q["rentable"] = map[string]any{"eq": true}
		q["rented"] = map[string]any{"eq": false}
	}
	p := &queryParser{s: text}
	for {
		p.skipSpaces()
		if p.done() {
			break
		}
		if err := p.comparison(q); err != nil {
			return nil, err
		}
	}
	order, err := ParseOrder(opts.Order)
	if err != nil {
		return nil, err
	}
	q["order"] = order
	switch strings.ToLower(opts.Type) {
	case "", "on-demand", "ondemand":
		q["type"] = "on-demand"
	case "bid", "interruptible":
		q["type"] = "bid"
	case "reserved":
		q["type"] = "reserved"
	default:
		return nil, &QueryError{Token: opts.Type, Reason: "unknown offer type", Hint: "use on-demand, interruptible (bid) or reserved"}
	}
	storage := opts.StorageGB
	if storage <= 0 {
		storage = 5.0
	}
	q["allocated_storage"] = storage
	if opts.Limit > 0 {
		q["limit"] = opts.Limit
	}
	return q, nil
}

// ParseOrder turns "num_gpus-,dph_total" into [["num_gpus","desc"],["dph_total","asc"]].
func ParseOrder(s string) ([][]string, error) {
	if strings.TrimSpace(s) == "" {
		s = "score-"
	}
	var out [][]string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		dir := "asc"
		switch {
		case strings.HasSuffix(part, "-"):
			dir, part = "desc", strings.TrimSuffix(part, "-")
		case strings.HasSuffix(part, "+"):
			part = strings.TrimSuffix(part, "+")
		}
		if a, ok := fieldAliases[part]; ok {
			part = a
		}
		if !isKnownField(part) {
			return nil, &QueryError{Token: part, Reason: "unknown order field", Hint: "allowed: " + strings.Join(AllowedQueryFields(), ", ")}
		}
		out = append(out, []string{part, dir})
	}
	return out, nil
}

type queryParser struct {
	s   string
	pos int
}

func (p *queryParser) done() bool { return p.pos >= len(p.s) }

func (p *queryParser) skipSpaces() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n') {
		p.pos++
	}
}

func isFieldByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func (p *queryParser) rest() string {
	r := p.s[p.pos:]
	if i := strings.IndexByte(r, ' '); i > 0 {
		return r[:i]
	}
	return r
}

func (p *queryParser) comparison(q provider.Query) error {
	start := p.pos
	for p.pos < len(p.s) && isFieldByte(p.s[p.pos]) {
		p.pos++
	}
	field := p.s[start:p.pos]
	if field == "" {
		return &QueryError{Token: p.rest(), Reason: "expected a field name", Hint: "write comparisons like gpu_name=RTX_4090 num_gpus>=2"}
	}
	op, err := p.operator(field)
	if err != nil {
		return err
	}
	p.skipSpaces()
	raw, err := p.value(field)
	if err != nil {
		return err
	}
	return addComparison(q, field, op, raw)
}

func (p *queryParser) operator(field string) (string, error) {
	save := p.pos
	p.skipSpaces()
	opStart := p.pos
	for p.pos < len(p.s) && strings.IndexByte("=<>!", p.s[p.pos]) >= 0 {
		p.pos++
	}
	if sym := p.s[opStart:p.pos]; sym != "" {
		op, ok := symbolicOps[sym]
		if !ok {
			return "", &QueryError{Token: field + sym, Reason: fmt.Sprintf("unknown operator %q", sym), Hint: "operators: " + allowedOps()}
		}
		return op, nil
	}
	// A word operator must stand between spaces.
	if p.pos > save {
		rest := p.s[p.pos:]
		for _, w := range wordOps {
			if strings.HasPrefix(rest, w.word+" ") || strings.HasPrefix(rest, w.word+"[") {
				p.pos += len(w.word)
				return w.op, nil
			}
		}
	}
	tok := field
	if p.pos < len(p.s) {
		tok += " " + p.rest()
	}
	return "", &QueryError{Token: strings.TrimSpace(tok), Reason: "expected an operator after the field", Hint: "operators: " + allowedOps()}
}

func (p *queryParser) value(field string) (string, error) {
	if p.done() {
		return "", &QueryError{Token: field, Reason: "missing value"}
	}
	switch p.s[p.pos] {
	case '[':
		end := strings.IndexByte(p.s[p.pos:], ']')
		if end < 0 {
			return "", &QueryError{Token: p.s[p.pos:], Reason: "unterminated list", Hint: "close it with ]"}
		}
		v := p.s[p.pos : p.pos+end+1]
		p.pos += end + 1
		return v, nil
	case '"':
		end := strings.IndexByte(p.s[p.pos+1:], '"')
		if end < 0 {
			return "", &QueryError{Token: p.s[p.pos:], Reason: "unterminated quoted value"}
		}
		v := p.s[p.pos : p.pos+end+2]
		p.pos += end + 2
		return v, nil
	}
	start := p.pos
	for p.pos < len(p.s) && p.s[p.pos] != ' ' && p.s[p.pos] != '\t' {
		p.pos++
	}
	return p.s[start:p.pos], nil
}

func addComparison(q provider.Query, field, op, raw string) error {
	token := field + " " + op + " " + raw
	if a, ok := fieldAliases[field]; ok {
		field = a
	}
	if !isKnownField(field) {
		hint := "allowed: " + strings.Join(AllowedQueryFields(), ", ")
		if near := nearestField(field); near != "" {
			hint = fmt.Sprintf("did you mean %s? %s", near, hint)
		}
		return &QueryError{Token: token, Reason: fmt.Sprintf("unknown field %q", field), Hint: hint}
	}
	v := strings.Trim(raw, ",[]")
	if op == "eq" && (v == "?" || v == "*" || v == "any") {
		delete(q, field) // the official way to cancel a default, e.g. verified=any
		return nil
	}
	var value any
	if op == "in" || op == "notin" {
		var list []any
		for _, el := range strings.Split(v, ",") {
			el = strings.TrimSpace(el)
			if el == "" {
				continue
			}
			x, err := convertValue(field, el, token)
			if err != nil {
				return err
			}
			list = append(list, x)
		}
		if len(list) == 0 {
			return &QueryError{Token: token, Reason: "empty list"}
		}
		value = list
	} else {
		// An ordering needs a number: "dph<abc" would otherwise be sent
		// as a string comparison that silently matches nothing.
		x, err := convertValue(field, v, token)
		if err != nil {
			return err
		}
		if str, ok := x.(string); ok && (op == "lt" || op == "lte" || op == "gt" || op == "gte") {
			if _, err := strconv.ParseFloat(str, 64); err != nil {
				return &QueryError{Token: token, Reason: fmt.Sprintf("%s %s needs a number, not %q", field, op, v)}
			}
		}
		value = x
	}
	m, _ := q[field].(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	m[op] = value
	q[field] = m
	return nil
}

func convertValue(field, v, token string) (any, error) {
	v = strings.ReplaceAll(v, "\"", "")
	if field == "driver_version" && strings.Contains(v, ".") {
		var b strings.Builder
		for _, part := range strings.Split(v, ".") {
			n, err := strconv.Atoi(part)
			if err != nil {
				return nil, &QueryError{Token: token, Reason: "driver_version must look like 535.86.05"}
			}
			fmt.Fprintf(&b, "%03d", n)
		}
		n, _ := strconv.ParseInt(b.String(), 10, 64)
		return n, nil
	}
	if mult, ok := fieldMultipliers[field]; ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, &QueryError{Token: token, Reason: fmt.Sprintf("%s needs a number", field)}
		}
		return f * mult, nil
	}
	switch v {
	case "true", "True":
		return true, nil
	case "false", "False":
		return false, nil
	case "None", "null":
		return nil, nil
	}
	return strings.ReplaceAll(v, "_", " "), nil
}

// nearestField suggests the known field closest to a misspelling, if any is
// within two edits.
func nearestField(f string) string {
	best, bestD := "", 3
	for _, k := range AllowedQueryFields() {
		if d := text.Distance(f, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}
