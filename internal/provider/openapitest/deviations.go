package openapitest

import (
	"path"
	"strings"
)

// Deviation allows violations where Vast's document is wrong or silent and
// independent evidence says what the real API does. Op and Field are
// patterns: a "*" segment (between "/" or ".") matches one segment, a
// trailing "**" matches the rest.
type Deviation struct {
	Op, Field string
	// Reason, when set, must appear in the validator's message: the entry
	// allows that failure at Field and no other.
	Reason string
	// Evidence names the source that overrides the document.
	Evidence string
}

// Deviations is the reviewed list. Every entry must still allow something
// in TestOpenAPIContract's traffic, so the list cannot rot.
//
// Sections (§) are of shared/vast-api.md, the project's wire notes.
var Deviations = []Deviation{
	// Instances.
	{Op: "GET /api/v0/instances/{id}", Field: "response.200.body/instances", Reason: "not nullable",
		Evidence: "§11: a destroyed or unknown instance is 200 {\"instances\": null}; vast-cli commit aa917e0 (2026-05) patches both CLIs for it; Max19970/easy-server#125"},
	{Op: "GET /api/v0/instances/{id}", Field: "response.200.body/instances/ports", Reason: "must be an array",
		Evidence: "§11: ports is the object {\"22/tcp\": [{HostIp, HostPort}]}, as the v1 list schema of the same document says; vast-cli, dstack and SkyPilot all index it as that object"},
	{Op: "GET /api/v0/instances", Field: "route",
		Evidence: "§1.2: the deprecated collection answers 410 deprecated_endpoint (swm-gpu/swm#13, SkyPilot #10517, dstack PR #4031); the document no longer lists it"},

	{Op: "PUT /api/v0/instances", Field: "route",
		Evidence: "§2.4: bulk start/stop {ids, state}; the 2026 vast-cli's `stop instances`/`start instances` call it (vastai/api/instances.py, scripts/data/api_scopes.json)"},
	{Op: "DELETE /api/v0/instances", Field: "route",
		Evidence: "§2.4: bulk destroy {instance_ids}; the 2026 vast-cli's `destroy instances A B -y` calls it (vastai/api/instances.py)"},
	{Op: "GET /api/v0/instances/pending-price-increases", Field: "route",
		Evidence: "§12.2: host price increases awaiting the renter {success, count, truncated, pending_price_increases}; vast-cli fb5017d (#401) vastai/api/price_increase.py, and the generated spec of docs PR #915"},
	{Op: "PUT /api/v0/instances/accept-price-increase", Field: "route",
		Evidence: "§12.2: body exactly {pending_price_increase_id}, 200 {success, pending_price_increase_id, contract_id}, a stale row 404 no_pending_price_increase; vast-cli vastai/api/price_increase.py @55679830, and the generated spec of docs PR #915"},
	{Op: "PUT /api/v0/instances/reject-price-increase", Field: "route",
		Evidence: "§12.2: as accept-price-increase; vast-cli vastai/api/price_increase.py @55679830, and the generated spec of docs PR #915"},
	{Op: "GET /api/v0/users/spend-rate", Field: "route",
		Evidence: "§12.2: the burn rate {gpu_cost_per_hour, container_storage_cost_per_hour, volume_storage_cost_per_hour, has_active_resources}; getUserSpendRate in the generated spec of docs PR #915"},
	{Op: "GET /api/v0/users/me/machine-earnings", Field: "route",
		Evidence: "§12.2: both official clients' `show earnings` send user_id \"me\" where the document types it integer (vast-cli 55679830, vast-python b25bd95)"},
	{Op: "GET /api/v0/instances/filters", Field: "route",
		Evidence: "§2.3: distinct filter values {\"filters\": [...]}, in the vendor route table (vast-cli scripts/data/api_scopes.json)"},
	{Op: "GET /api/v0/gpu_names/unique", Field: "route",
		Evidence: "the official CLI fetches and caches the GPU name list from it (vast-python vast.py; performance review §2 seeds that cache)"},
	{Op: "GET /api/v0/users/me/invoices", Field: "route",
		Evidence: "§2.9: legacy invoices ?owner=me&sdate&edate&inc_charges, the 2024 CLI's `show invoices` (vast-python vast.py show__invoices)"},
	{Op: "GET /api/v0/invoices", Field: "route",
		Evidence: "§2.9: invoice search ?select_cols&select_filters, in the vendor route table under billing_read (vast-cli scripts/data/api_scopes.json)"},
	{Op: "PUT /api/v0/commands/rsync", Field: "route",
		Evidence: "§2.7: copy with a local side (src_id or dst_id null); vast-cli `copy` calls it, then runs rsync over SSH (vastai/api/storage.py)"},

	// Offer search.
	{Op: "GET /api/v0/bundles", Field: "route",
		Evidence: "§2.1: the legacy GET /bundles?q= form is still in the vendor's route table (vast-cli scripts/data/api_scopes.json)"},
	{Op: "POST /api/v0/bundles", Field: "request.body/type", Reason: "value must be one of",
		Evidence: "§11, §2.1.1: vast-cli and the 3P Go SDK send type \"on-demand\" (the document's enum says \"ondemand\"; both occur in vendor material)"},
	{Op: "POST /api/v0/bundles", Field: "request.body/order", Reason: "minItems",
		Evidence: "§11, §2.1.1: the CLIs send order as one [field, dir] pair, [[\"score\",\"desc\"]]; the document puts minItems 2 on the outer array"},
	{Op: "POST /api/v0/bundles", Field: "request.body/*/*", Reason: "body field not declared",
		Evidence: "the operation's own description: every filter field takes eq, neq, gt, lt, gte, lte, in, notin; the per-field schemas list only an example operator (a misspelled field name is still caught one level up)"},

	// Create.
	{Op: "PUT /api/v0/asks/{id}", Field: "request.body/client_id", Reason: "body field not declared",
		Evidence: "§2.2: vast-cli, dstack and the 3P Go SDK always send client_id \"me\"; the document omits it"},
	{Op: "PUT /api/v0/asks/{id}", Field: "request.body/env", Reason: "got object, want string",
		Evidence: "§11, §2.2: every client (vast-cli parse_env, dstack, SkyPilot) sends env as an object; the document types it as a docker-flags string"},
	{Op: "PUT /api/v0/asks/{id}", Field: "request.body/runtype", Reason: "value must be one of",
		Evidence: "§11, §2.2: the 2026 vast-cli sends combined truncated tokens such as \"ssh_direc ssh_proxy\" (its create code); the document's enum lacks them"},
	{Op: "PUT /api/v0/asks/{id}", Field: "request.body", Reason: "missing property 'image'",
		Evidence: "§2.2: image is required unless template_hash_id is given, the template supplying it (vendor create guide; vast-cli create --template_hash); the document requires image always (the schema's only required field, so nothing else is let through)"},
	{Op: "PUT /api/v0/asks/{id}", Field: "request.body/price", Reason: "got null",
		Evidence: "§11: the 2026 vast-cli sends price null for an on-demand rental (its create code)"},
	{Op: "PUT /api/v0/asks/{id}", Field: "request.body/image_login", Reason: "got null",
		Evidence: "§11: the 2026 vast-cli sends image_login null when no registry login is given (its create code)"},

	// Users.
	{Op: "GET /api/v0/users/current", Field: "response.400.status",
		Evidence: "§1.2: since 2026-04-29 an undeclared query parameter gets 400 (\"owner: Extra inputs are not permitted\"); vast-cli #382, fixed by PR #384"},

	// Input validation the document does not list (§11: measured against a
	// simulator the 2026 official CLI accepts).
	{Op: "POST /api/v0/auth/apikeys", Field: "response.400.body/error", Reason: "value must be one of",
		Evidence: "§11: a key created without name gets 400 invalid_args; the document's enum for this 400 lists only invalid_permissions and missing_permissions"},
	{Op: "PUT /api/v0/instances/request_logs/{id}", Field: "response.400.status",
		Evidence: "§11: an out-of-enum daemon_logs gets 400 invalid_args; the document lists no 400 for this route"},

	// Every operation: answers the document lists on some routes only.
	{Op: "* /api/**", Field: "response.401.status",
		Evidence: "§1.3, §11: a deleted key or a key without the route's permission gets 401 (vast-cli cli/main.py); the document lists 401 on some operations only"},
	{Op: "* /api/**", Field: "response.403.status",
		Evidence: "§1.3, §11: a request without a key gets 403 auth_error \"This action requires login.\" (3P jhammant/AIonDemandCluster#1; the same document lists it on charges, invoices, bundles)"},
	{Op: "* /api/**", Field: "response.404.status",
		Evidence: "§1.3, §11: an unknown key gets 404 auth_error \"Invalid user key\" (3P jhammant/AIonDemandCluster#1; the same document lists it on charges and bundles)"},
	{Op: "* /api/**", Field: "response.429.status",
		Evidence: "§6: every endpoint is rate-limited per identity (vendor docs rate-limits-and-errors.mdx); many operations omit their 429"},
	{Op: "* /api/**", Field: "response.429.content-type",
		Evidence: "§11, §6: 429 bodies are sometimes plain text \"API requests too frequent\" (vendor docs rate-limits-and-errors.mdx)"},
	{Op: "* /api/**", Field: "response.50?.status",
		Evidence: "§6: server and gateway errors (500, 502, 503, 504) that vast-cli retries; the document lists none of them"},
}

func matchDeviation(v Violation) int {
	for i, d := range Deviations {
		if match(d.Op, v.Op) && match(d.Field, v.Field) && strings.Contains(v.Detail, d.Reason) {
			return i
		}
	}
	return -1
}

// match compares pattern and s segment by segment ("/" and "." split).
func match(pattern, s string) bool {
	split := func(x string) []string {
		return strings.FieldsFunc(x, func(r rune) bool { return r == '/' || r == '.' || r == ' ' })
	}
	ps, ss := split(pattern), split(s)
	for i, p := range ps {
		if p == "**" && i == len(ps)-1 {
			return len(ss) >= i
		}
		if i >= len(ss) {
			return false
		}
		if ok, err := path.Match(p, ss[i]); err != nil || !ok {
			return false
		}
	}
	return len(ps) == len(ss)
}
