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
//   - As strict as Vast's input validation: the enums, ranges and required
//     fields of Vast's OpenAPI document (runtype, target_state, daemon_logs,
//     charges format and limit, v1 list limit 1..25 and select_cols, API key
//     name, bid 0.001..32) get 400 with the document's error codes; unknown
//     query parameters on /users/current get 400 (since 2026-04-29).
//   - The routes official clients call beyond the lifecycle: bulk
//     stop/start/destroy, reboot, execute (ls, rm, du in the sandbox; output
//     at result_url), change bid (billing follows), deposit, filters, GPU
//     names, legacy and searched invoices, copy_direct, rsync, rclone to a
//     directory-backed cloud integration, and a template catalog whose
//     hashes resolve to an image (400 invalid_args otherwise).
//   - A v1 list page renders only its own rows; SeedInstances fills an
//     account for listing at scale.
//   - Instances run their SSH sessions in a host sandbox directory, or,
//     with Config.Images (Podman), inside their image pulled from the
//     registry the reference names (see image.go); a failed pull is
//     docker's status message on a "created" instance.
//   - Control endpoints live under /_sim/ (never under /api/), so a real
//     client can never reach them by accident.
package sim
