// Package sim is a wire-faithful Vast.ai marketplace simulator: an
// http.Handler speaking the same API as console.vast.ai, plus an SSH server
// per running instance with a fake nvidia-smi, per-second billing, and fault
// knobs. It shares no code with the real client (package vast): it is
// written from the wire notes, so a client bug is not mirrored here and any
// client written from Vast's documentation works against it unchanged.
//
// # Time
//
// All behaviour hangs off an injected clock.Clock: the state machine is
// evaluated lazily whenever the API or SSH server looks at an instance, so a
// test with a clock.Fake controls every transition, and `vastrun sim serve`
// runs a clock.Scaled to make a minute of boot take seconds.
//
// Under a scaled clock the simulator bills in scaled time but reports wall
// time: every timestamp it shows (start_date, duration, charge and invoice
// windows, log lines, SSH key created_at) is the wall-clock moment the
// event happened, so it never lies ahead of the wall clock at any speed,
// and a client computing now − start_date or a charges window from its own
// clock sees sensible values. Amounts, uptime_mins and billed hours stay in
// simulated time (a 30× run bills 30 s per wall second). The /_sim/ control
// plane reports the simulator's own clock.
//
// # Contract
//
//   - Paths, methods and both auth forms (Authorization: Bearer and
//     ?api_key=) as the real API; 403 auth_error without a key, 404
//     auth_error for an unknown one; responses are exactly application/json.
//   - One offer backs one instance. Instances go null → loading → running;
//     destroy makes them gone ({"instances": null}, absent from listings).
//   - GET /api/v0/instances/ answers 410 deprecated_endpoint (switchable).
//   - Billing: running bills dph_total, every other existing state except
//     offline bills storage; charges and balance are readable over the API.
//   - CONTAINER_API_KEY (instance_api_key) may only start, stop or destroy
//     its own instance.
//   - Instances' processes see ClockSpeedEnv (VASTRUN_SIM_CLOCK_SPEED) when
//     the clock is scaled: a simulator-only variable, so that the
//     on-instance dead-man switch can count its TTL in the simulator's time.
//   - As strict as Vast's input validation: the enums, ranges and required
//     fields of Vast's OpenAPI document (runtype, target_state, daemon_logs,
//     charges format and limit, v1 list limit 1..25 and select_cols, API key
//     name, bid 0.001..32) get 400 with the document's error codes; unknown
//     query parameters on /users/current get 400 (since 2026-04-29).
//   - The routes official clients call beyond the lifecycle: bulk
//     stop/start/destroy, reboot, execute (ls, rm, du in the sandbox; output
//     at result_url), change bid (billing follows), deposit, filters, GPU
//     names, legacy and searched invoices, copy_direct, rsync, rclone to a
//     directory-backed cloud integration, a template catalog whose
//     hashes resolve to an image (400 invalid_args otherwise; the official
//     CLI's documented example hash is in it), spend-rate,
//     machine-earnings and pending-price-increases.
//   - The 2026 answers (vast-api.md §12): a second attach of one key is
//     200 success:false "SSH key already associated with instance."; bulk
//     destroy of no own id is 404 instances_not_found; bulk start/stop
//     takes at most 64 ids and succeeds when one was updated; an on-demand
//     contract's bid cannot change (400); a deleted key is 401; disk under
//     8 GB is 400; a non-integer instance id is 400.
//   - A v1 list page renders only its own rows; SeedInstances fills an
//     account for listing at scale.
//   - Instances run their SSH sessions in a host sandbox directory, or,
//     with Config.Images (Podman), inside their image pulled from the
//     registry the reference names (see image.go); a failed pull is
//     docker's status message on a "created" instance.
//   - Control endpoints live under /_sim/ (never under /api/), so a real
//     client can never reach them by accident.
//
// # Deviations from Vast's documents
//
// Where the documents are silent or uncertain the simulator picks an
// answer; each is named here with its evidence (§ of the project's
// vast-api.md). Wire shapes the OpenAPI document gets wrong are in
// openapitest.Deviations instead.
//   - Bulk destroy of own and unknown ids together destroys the own ones
//     and answers 200: §12.1 documents 404 instances_not_found only when
//     none is the caller's and calls the mixed case UNCERTAIN. The 404's
//     id list is written as a Python list ("Instances [1, 2] not found."),
//     a guess at the documented "Instances <ids> not found.".
//   - Bulk start/stop never answers 400 insufficient_credit (§12.1): the
//     simulated account's credit is not checked there.
//   - An unknown template_hash_id in a create is 400 invalid_args
//     "Invalid template_hash_id …": no vendor source names this answer
//     (§12.1 lists the create's 400 invalid_args cases without it).
//   - Disk under 8 GB is 400 invalid_args: "Minimum 8 when specified" is on
//     an unmerged documentation branch only, and whether the server
//     enforces it is UNCERTAIN (§12.4).
//   - Execute with a path the sandbox lacks (/etc) prints the command's
//     own error in its output: Vast's containers have those paths, and no
//     API error is documented for them (§2.4).
//   - Offers' end_date is on the simulator's own clock, not reported as
//     wall time as past events are: it lies in the future anyway, and a
//     client on the same clock (--sim) then sees the host's remaining time
//     at any speed. A wall-clock client of a scaled `sim serve` sees hosts
//     stay longer by as much as the simulator runs ahead.
//   - Host earnings are zero and no host raises a price: the simulated
//     account hosts nothing and hosts never ask (§12.2); the routes answer
//     in their documented shapes.
//   - A deleted key is 401 auth_error "Invalid user key" (§12.3 gives the
//     status and message, not the error code).
package sim
