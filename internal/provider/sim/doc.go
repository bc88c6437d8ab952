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
// clock sees sensible values. Instants still to come (end dates) are shown
// the same way, as the wall-clock moment the simulator will reach them,
// unless the client runs on the simulator's own clock (Config.SharedClock,
// vastrun --sim): then on that clock, so end − now is the time left for
// either kind of client. Amounts, uptime_mins and billed hours stay in
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
//     CLI's documented example hash is in it), spend-rate and
//     machine-earnings.
//   - Contracts end (priceincrease.go, vast-api.md §12.2, §12.4): at their
//     host's end date (the offer's end_date, moved by the host_end fault),
//     or at the contract_end_date of a host's price increase (the
//     price_increase fault) that was rejected or left unanswered; an ended
//     contract expires (its processes killed, storage billed, no restart).
//     Pending increases are listed at GET
//     /api/v0/instances/pending-price-increases/ in the documented shape
//     and answered by PUT …/accept-price-increase/ or
//     …/reject-price-increase/ with exactly {"pending_price_increase_id"}
//     (other keys 400; an increase not pending 404
//     no_pending_price_increase); accepted, the new price is billed and the
//     contract goes on.
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
//   - Bulk destroy takes at most 64 ids (400 invalid_args "chunk length of
//     N > 64"), the cap §12.1 documents for the bulk state change: the
//     destroy's own cap is not documented, so the simulator is no more
//     lenient than the route beside it.
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
//   - Host earnings are zero: the simulated account hosts nothing (§12.2).
//   - A price increase is asked only by a fault, of an on-demand contract
//     (a bid is the renter's own price), raising the GPU price alone; its
//     term (asking to contract_end_date) defaults to 1 h, which no vendor
//     source names. Unanswered or rejected, the contract is billed at the
//     old price until it ends: whether an unanswered increase changes what
//     a running contract is billed is UNCERTAIN (§12.2). A stale answer is
//     404 no_pending_price_increase, never the older backends' 409.
//   - An expired instance shows actual_status "exited", intended_status
//     "running", cur_state and next_state "stopped" and a status_msg saying
//     the contract ended: no vendor source shows an expired instance's
//     states (§12.4 says only that it cannot restart). A start of one
//     changes nothing and is not refused with an error.
//   - A deleted key is 401 auth_error "Invalid user key" (§12.3 gives the
//     status and message, not the error code).
package sim
