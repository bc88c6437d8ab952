#!/usr/bin/env bash
# Offer search at scale: a `vastrun sim serve --offers 10000` process, its
# RSS idle, after all-row searches (every offer returned) and after broad
# 20-row searches (what `vastrun offers` asks), with the time each batch took.
#
#   scripts/bench-sim-search.sh              # builds ./cmd/vastrun
#   VASTRUN=path/to/vastrun scripts/bench-sim-search.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$work"' EXIT
bin=${VASTRUN:-}
if [ -z "$bin" ]; then CGO_ENABLED=0 go build -o "$work/vastrun" ./cmd/vastrun; bin="$work/vastrun"; fi
"$bin" sim serve --offers 10000 --ready-file "$work/ready" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$work/ready" ] && break; sleep 0.1; done
[ -s "$work/ready" ] || { cat "$work/log" >&2; echo "sim serve did not start" >&2; exit 1; }
url=$(python3 -c "import json; print(json.load(open('$work/ready'))['url'])")
key=$(python3 -c "import json; print(json.load(open('$work/ready'))['api_key'])")
rss() { awk '/VmRSS|VmHWM/ {printf "%s %.1f MB  ", $1, $2/1024}' /proc/$pid/status; }
q() { curl -s -o /dev/null -w '%{size_download}' -H "Authorization: Bearer $key" -X POST "$url/api/v0/bundles/" -d "$1"; }
echo "idle: $(rss)"
for batch in 3 7; do
  t0=$EPOCHREALTIME
  for _ in $(seq $batch); do bytes=$(q '{"num_gpus": {"gte": 1}, "limit": 10000}'); done
  t1=$EPOCHREALTIME
  echo "after $batch more all-row searches ($(python3 -c "print(f'{($t1-$t0)/$batch:.3f}')") s each, $((bytes >> 20)) MiB each): $(rss)"
done
t0=$EPOCHREALTIME
for _ in $(seq 20); do q '{"num_gpus": {"gte": 1}, "rentable": {"eq": true}, "verified": {"eq": true}, "external": {"eq": false}, "order": [["score","desc"]], "limit": 20}' >/dev/null; done
t1=$EPOCHREALTIME
echo "after 20 broad 20-row searches ($(python3 -c "print(f'{($t1-$t0)/20*1000:.1f}')") ms each): $(rss)"
