#!/usr/bin/env bash
# Cleanup and listing at scale, whole process against whole process: on a
# fresh `vastrun sim serve --instances 1000` account per round (labels
# sim-seed-0 … sim-seed-9, 100 instances each), the wall time of
#   vastrun reap --json                                 (a full listing, dry run)
#   vastrun down --label sim-seed-0 --yes --settle 0s   (100 of the 1,000)
# then checks that no instance with the label is left. With BASE set, the
# same for another build in the same round (A B A B …), so the two compare
# on the same load. Prints the load average beside the figures: the
# machine is shared, and a figure means little without it.
#
#   scripts/bench-cleanup.sh                      # builds ./cmd/vastrun
#   N=7 VASTRUN=path/to/vastrun BASE=path/to/older scripts/bench-cleanup.sh
#
# --settle 0s: down's default (20 s) waits, listing after listing, for a
# rental a lagging listing may not show yet; that wait is not work.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-5}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$work"' EXIT
bin=${VASTRUN:-}
if [ -z "$bin" ]; then CGO_ENABLED=0 go build -o "$work/vastrun" ./cmd/vastrun; bin="$work/vastrun"; fi
builds=("$bin")
[ -n "${BASE:-}" ] && builds+=("$BASE")
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "commit $(git rev-parse --short HEAD)  N=$N  load at start: $(load)  cores: $(nproc)"

start_sim() {
  rm -f "$work/ready"
  "$1" sim serve --instances 1000 --ready-file "$work/ready" >"$work/sim.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do [ -s "$work/ready" ] && break; sleep 0.1; done
  [ -s "$work/ready" ] || { cat "$work/sim.log" >&2; echo "sim serve did not start" >&2; exit 1; }
  VAST_URL=$(python3 -c "import json; print(json.load(open('$work/ready'))['url'])")
  VAST_API_KEY=$(python3 -c "import json; print(json.load(open('$work/ready'))['api_key'])")
  export VAST_URL VAST_API_KEY
}
stop_sim() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
# left LABEL: instances the account still has with LABEL (one listing page
# is enough once the label is clean; the total says how many there are).
left() {
  curl -s -G -H "Authorization: Bearer $VAST_API_KEY" "$VAST_URL/api/v1/instances/" \
    --data-urlencode "select_filters={\"label\":{\"in\":[\"$1\"]}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["total_instances"])'
}
timed() { # timed OUT CMD...: wall seconds of CMD, its stdout in OUT
  local t0=$EPOCHREALTIME
  "${@:2}" >"$1" 2>"$work/err" || { cat "$work/err" >&2; echo "failed: ${*:2}" >&2; exit 1; }
  python3 -c "print(f'{$EPOCHREALTIME-$t0:.4f}')"
}

mkdir -p "$work/cwd"
cd "$work/cwd"
for i in $(seq 0 $N); do # round 0 is the warm-up
  for k in "${!builds[@]}"; do
    b=${builds[$k]}
    start_sim "$b"
    r=$(timed "$work/reap.json" "$b" reap --json)
    scanned=$(python3 -c "import json; print(json.load(open('$work/reap.json'))['scanned'])")
    d=$(timed "$work/down.json" "$b" down --label sim-seed-0 --yes --settle 0s -f none.yaml --json)
    gone=$(python3 -c "import json; print(len(json.load(open('$work/down.json'))['destroyed_confirmed']))")
    l=$(left sim-seed-0)
    stop_sim
    [ "$scanned" = 1000 ] && [ "$gone" = 100 ] && [ "$l" = 0 ] || { echo "round $i build $k: scanned $scanned, destroyed $gone, left $l" >&2; exit 1; }
    [ "$i" = 0 ] || echo "$k $r $d" >>"$work/times"
  done
done
echo "load at end: $(load)"
python3 - "$work/times" "${builds[@]}" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
names = ["this build"] + (["BASE"] if len(sys.argv) > 3 else [])
print("| build | reap --json, 1,000 instances (s) | down --label, 100 of 1,000 (s) | down / reap | left |")
print("|---|---|---|---|---|")
for k, name in enumerate(names):
    r = [float(x[1]) for x in rows if x[0] == str(k)]
    d = [float(x[2]) for x in rows if x[0] == str(k)]
    ratio = statistics.median(b / a for a, b in zip(r, d))
    print(f"| {name} | {statistics.median(r):.3f} ({min(r):.3f}–{max(r):.3f}) | {statistics.median(d):.3f} ({min(d):.3f}–{max(d):.3f}) | {ratio:.1f}× | 0 |")
if len(names) == 2:
    r0 = [float(x[1]) for x in rows if x[0] == "0"]
    r1 = [float(x[1]) for x in rows if x[0] == "1"]
    print(f"reap --json, this build / BASE (paired by round): {statistics.median(a / b for a, b in zip(r0, r1)):.2f}×")
EOF
