#!/usr/bin/env bash
# Measures interruption -> replacement-requested latency for `vastrun train`:
# a real-time simulator, the example training job, a preemption injected at a
# recorded instant, then the journal's timestamps for detection (failover)
# and for the replacement's rent intent. Usage: scripts/bench-interruption.sh [POLL] [RUNS]
set -euo pipefail
poll=${1:-5s}
runs=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'kill $simpid 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/vastrun" "$root/cmd/vastrun"
cp -r "$root/examples" "$work/"
sed -i "s/^  poll: .*/  poll: $poll/; s/TRAIN_STEP_DELAY: .*/TRAIN_STEP_DELAY: \"0.05\"/" "$work/examples/train/train.yaml"
cd "$work"
"$work/vastrun" sim serve --speed 1 --sim-key bench --ready-file sim.json >/dev/null 2>&1 &
simpid=$!
for i in $(seq 100); do [ -s sim.json ] && break; sleep 0.1; done
export VAST_URL=$(python3 -c 'import json;print(json.load(open("sim.json"))["url"])') VAST_API_KEY=bench
for r in $(seq "$runs"); do
  "$work/vastrun" train --yes -f examples/train/train.yaml --evidence-dir "ev$r" >/dev/null 2>"log$r" &
  pid=$!
  # wait until the first checkpoint has committed, then preempt
  for i in $(seq 600); do grep -q "checkpoint 100 committed" "log$r" && break; sleep 0.1; done
  id=$(curl -s "$VAST_URL/_sim/state" | python3 -c 'import json,sys; print(json.load(sys.stdin)["live"][0]["id"])') || { echo "run $r: no live instance; its log:" >&2; tail -5 "log$r" >&2; exit 1; }
  t0=$(date +%s.%N)
  curl -s -X POST "$VAST_URL/_sim/faults" -d "{\"kind\":\"preempt\",\"instance\":$id}" >/dev/null
  wait $pid
  run=$(cat .vastrun/current)
  python3 - "$t0" ".vastrun/runs/$run/journal.jsonl" "$poll" <<'PY'
import json, sys, datetime
t0 = float(sys.argv[1])
recs = [json.loads(l) for l in open(sys.argv[2])]
ts = lambda r: datetime.datetime.fromisoformat(r["time"].replace("Z", "+00:00")).timestamp()
fail = next(r for r in recs if r["step"] == "failover")
rent2 = [r for r in recs if r["step"] == "rent" and r["type"] == "intent"][1]
print(f"poll {sys.argv[3]}: interruption -> detected {ts(fail)-t0:6.2f} s, -> replacement requested {ts(rent2)-t0:6.2f} s")
PY
done
