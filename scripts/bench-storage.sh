#!/usr/bin/env bash
# Checkpoint upload/restore against the S3 copiers a user would otherwise
# pick, all as whole processes, on the same files and the same server:
#
#   vastrun checkpoint commit|restore   (hidden command: the agent's commit and
#                                        verifying restore paths, one process)
#   aws s3 cp                           (preinstalled awscli)
#   s5cmd cp                            (github.com/peak/s5cmd/v2 v2.3.0)
#
# against versitygw v1.8.0 (posix backend) and moto_server, for one 256 MiB
# file and a 64 x 4 MiB checkpoint. Each comparison runs one warm-up of each
# side, then N pairs A B A B ...; it prints min/median/max wall seconds of
# each side and the median (min-max) of the per-pair ratios A/B (< 1: vastrun
# is faster), plus each side's CPU seconds (user+sys) and the server's CPU
# seconds meanwhile (medians), peak RSS, the 1-minute load average after each
# comparison, the single-core SHA-256 rates (one message, and two hashed
# together by internal/sha256x2, as a restore does) as the physical limit of a
# verifying restore. On a busy machine wall time follows CPU time: read the
# CPU columns beside the ratios. Only ratios from one run mean anything on a
# shared machine; alternating the sides spreads background load over both.
#
#   scripts/bench-storage.sh              # N=5, both servers, both shapes
#   N=9 SERVERS=versitygw SHAPES=one OPS=restore scripts/bench-storage.sh
#   QUICK=1 scripts/bench-storage.sh      # 16 MiB / 8 x 1 MiB, N=1: a smoke run (.ci/run)
#   PEERS=s5cmd OPS=restore SERVERS=versitygw scripts/bench-storage.sh  # against s5cmd only
#
# Tools missing from PATH are built into $BENCH_TOOLS (default
# ~/.cache/vastrun-bench/bin) from the Go module proxy. Every server it
# starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-5}
SERVERS=${SERVERS:-"versitygw moto"}
SHAPES=${SHAPES:-"one shards"}
OPS=${OPS:-"upload restore"} # restore needs the upload's commit; with OPS=restore, one untimed commit is made
PEERS=${PEERS:-"aws s5cmd"}   # the copiers vastrun is compared with
BENCH_TOOLS=${BENCH_TOOLS:-$HOME/.cache/vastrun-bench/bin}
one_mib=256 shard_count=64 shard_mib=4
if [ -n "${QUICK:-}" ]; then N=1 one_mib=16 shard_count=8 shard_mib=1; fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

die() { echo "bench-storage: $*" >&2; exit 1; }
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---- tools ----
mkdir -p "$BENCH_TOOLS" "$work/bin"
export PATH="$BENCH_TOOLS:$PATH"
if ! command -v versitygw >/dev/null; then
  echo "building versitygw v1.8.0 into $BENCH_TOOLS" >&2
  GOBIN="$BENCH_TOOLS" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 || die "cannot install versitygw"
fi
if ! command -v s5cmd >/dev/null; then
  # `go install …@v2.3.0` fails here (the proxy refuses the module's version
  # list, which go install reads for deprecations); a scratch module works.
  echo "building s5cmd v2.3.0 into $BENCH_TOOLS" >&2
  mkdir -p "$work/s5"
  printf 'module s5build\n\ngo 1.26\n\nrequire github.com/peak/s5cmd/v2 v2.3.0\n' > "$work/s5/go.mod"
  (cd "$work/s5" && go mod download github.com/peak/s5cmd/v2@v2.3.0 && GOFLAGS=-mod=mod go build -o "$BENCH_TOOLS/s5cmd" github.com/peak/s5cmd/v2) \
    || die "cannot build s5cmd"
fi
command -v aws >/dev/null || die "aws (awscli) is missing (it also makes the bucket)"
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) is missing"
CGO_ENABLED=0 go build -o "$work/bin/vastrun" ./cmd/vastrun
# The commit and load when the binary was built (HEAD may move during a run).
built="$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo '+changes')"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
V="$work/bin/vastrun"

export AWS_ACCESS_KEY_ID=testkey AWS_SECRET_ACCESS_KEY=testsecret AWS_DEFAULT_REGION=us-east-1
unset AWS_PROFILE AWS_SESSION_TOKEN

# ---- servers ----
start_versitygw() {
  local port; port=$(freeport)
  mkdir -p "$work/vgw"
  versitygw --access testkey --secret testsecret --port "127.0.0.1:$port" posix "$work/vgw" >"$work/vgw.log" 2>&1 &
  pids+=($!)
  SRV=$!
  wait_http "http://127.0.0.1:$port" "$work/vgw.log"
  EP="http://127.0.0.1:$port"
}
start_moto() {
  command -v moto_server >/dev/null || die "moto_server is missing"
  local port; port=$(freeport)
  moto_server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
  pids+=($!)
  SRV=$!
  wait_http "http://127.0.0.1:$port" "$work/moto.log"
  EP="http://127.0.0.1:$port"
}
wait_http() {
  for _ in $(seq 200); do
    curl -s -o /dev/null "$1/" && return 0
    sleep 0.1
  done
  cat "$2" >&2; die "server at $1 did not start"
}

# ---- data ----
mkdir -p "$work/one" "$work/shards"
head -c $((one_mib << 20)) /dev/urandom > "$work/one/ckpt.bin"
for i in $(seq -w 1 "$shard_count"); do head -c $((shard_mib << 20)) /dev/urandom > "$work/shards/shard-$i.bin"; done

# ---- timing ----
# run LABEL: runs "${CMD[@]}" as one timed process; appends "wall rss_kib
# cpu_s server_cpu_s" to $work/LABEL (cpu: the process's user+sys; server:
# the S3 server's user+sys meanwhile, from /proc, in clock ticks).
srvticks() { awk '{print $14+$15}' "/proc/$SRV/stat"; }
run() {
  local t0 t1 s0 s1
  s0=$(srvticks)
  t0=$EPOCHREALTIME
  /usr/bin/time -f '%M %U %S' -o "$work/rss" "${CMD[@]}" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; die "failed: ${CMD[*]}"; }
  t1=$EPOCHREALTIME
  s1=$(srvticks)
  read -r rss u sy < <(tail -1 "$work/rss")
  echo "$(python3 -c "print(f'{$t1-$t0:.4f} $rss {$u+$sy:.2f} {($s1-$s0)/$(getconf CLK_TCK):.2f}')")" >> "$work/$1"
}

rows=()
# compare NAME A B: A and B are shell functions that prepare (untimed: clear
# an output directory, pick a step) and set CMD. One warm-up each, then N
# alternating pairs.
compare() {
  local name=$1 a=$2 b=$3
  rm -f "$work/A" "$work/B"
  $a; run warm; $b; run warm
  for _ in $(seq "$N"); do
    $a; run A
    $b; run B
  done
  rows+=("$(python3 - "$name" "$work/A" "$work/B" <<'PY'
import statistics, sys
name, a, b = sys.argv[1], [l.split() for l in open(sys.argv[2])], [l.split() for l in open(sys.argv[3])]
aw, bw = [float(x[0]) for x in a], [float(x[0]) for x in b]
ar, br = max(int(x[1]) for x in a) / 1024, max(int(x[1]) for x in b) / 1024
ac, bc = statistics.median(float(x[2]) for x in a), statistics.median(float(x[2]) for x in b)
asv, bsv = statistics.median(float(x[3]) for x in a), statistics.median(float(x[3]) for x in b)
load = open("/proc/loadavg").read().split()[0]
r = [x / y for x, y in zip(aw, bw)]
f = lambda v: f"{statistics.median(v):.3f} ({min(v):.3f}–{max(v):.3f})"
print(f"| {name} | {len(r)} | {f(aw)} | {f(bw)} | **{statistics.median(r):.2f}** ({min(r):.2f}–{max(r):.2f}) | {ac:.2f} / {bc:.2f} | {asv:.2f} / {bsv:.2f} | {ar:.0f} / {br:.0f} MiB | {load} |")
PY
)")
  echo "${rows[-1]}" >&2
}

sha_rate() {
  mkdir -p "$work/sha"
  cat > "$work/sha/main.go" <<'GO'
package main

import (
	"crypto/sha256"
	"fmt"
	"time"
)

func main() {
	buf := make([]byte, 1<<20)
	best := 0.0
	for r := 0; r < 5; r++ {
		h := sha256.New()
		t0 := time.Now()
		for i := 0; i < 256; i++ {
			h.Write(buf)
		}
		h.Sum(nil)
		if v := 256 / time.Since(t0).Seconds(); v > best {
			best = v
		}
	}
	fmt.Printf("%.0f", best)
}
GO
  (cd "$work/sha" && printf 'module shaspeed\n\ngo 1.26\n' > go.mod && go run .)
}

step=0
for server in $SERVERS; do
  case $server in
    versitygw) start_versitygw ;;
    moto) start_moto ;;
    *) die "unknown server $server (want versitygw or moto)" ;;
  esac
  aws --endpoint-url "$EP" s3 mb s3://bench >/dev/null
  for shape in $SHAPES; do
    case $shape in
      one) src="$work/one"; what="1 × ${one_mib} MiB" ;;
      shards) src="$work/shards"; what="${shard_count} × ${shard_mib} MiB" ;;
      *) die "unknown shape $shape (want one or shards)" ;;
    esac
    store="s3://bench/v-$shape"
    # Upload. Each vastrun run commits a new step (files, manifest, marker).
    up_v() { step=$((step+1)); CMD=(env AWS_ENDPOINT_URL="$EP" "$V" checkpoint commit --store "$store" --dir "$src" --step "$step"); }
    up_aws() { CMD=(aws --endpoint-url "$EP" s3 cp --quiet --recursive "$src" "s3://bench/aws-$shape/"); }
    up_s5() { CMD=(s5cmd --endpoint-url "$EP" cp "$src/*" "s3://bench/s5-$shape/"); }
    if [[ " $OPS " == *" upload "* ]]; then
      [[ " $PEERS " != *" aws "* ]] || compare "$server $what upload: vastrun vs aws s3 cp" up_v up_aws
      [[ " $PEERS " != *" s5cmd "* ]] || compare "$server $what upload: vastrun vs s5cmd" up_v up_s5
    else
      up_v; "${CMD[@]}" >/dev/null
    fi
    [[ " $OPS " == *" restore "* ]] || continue
    # Restore the last committed step; the peers copy the very same objects.
    last=$step
    obj="s3://bench/v-$shape/checkpoints/$(printf %012d "$last")/files"
    re_v() { rm -rf "$work/out-v"; CMD=(env AWS_ENDPOINT_URL="$EP" "$V" checkpoint restore --store "$store" --dir "$work/out-v" --step "$last"); }
    re_s5() { rm -rf "$work/out-p"; mkdir -p "$work/out-p"; CMD=(s5cmd --endpoint-url "$EP" cp "$obj/*" "$work/out-p/"); }
    re_aws() { rm -rf "$work/out-p"; mkdir -p "$work/out-p"; CMD=(aws --endpoint-url "$EP" s3 cp --quiet --recursive "$obj/" "$work/out-p/"); }
    [[ " $PEERS " != *" s5cmd "* ]] || compare "$server $what restore (verifying): vastrun vs s5cmd" re_v re_s5
    [[ " $PEERS " != *" aws "* ]] || compare "$server $what restore (verifying): vastrun vs aws s3 cp" re_v re_aws
    cmp -s <(cd "$src" && sha256sum * ) <(cd "$work/out-v" && sha256sum *) || die "vastrun restored different bytes"
    cmp -s <(cd "$src" && sha256sum * ) <(cd "$work/out-p" && sha256sum *) || die "the peer restored different bytes"
  done
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
done

echo
echo "vastrun $built, $(nproc) cores, load average at the start: $load0, at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "single-core SHA-256 (Go crypto/sha256, best of 5 × 256 MiB): $(sha_rate) MiB/s"
echo "single-core SHA-256 of two messages at once (internal/sha256x2, interleaved): $(go test -run '^$' -bench 'Write2$' -benchtime 200x ./internal/sha256x2 2>/dev/null | awk '/^BenchmarkWrite2/{for (i = 2; i <= NF; i++) if ($i == "MB/s") print $(i-1), "MB/s"}')"
echo "S3 socket receive buffer: net.core.rmem_max $(cat /proc/sys/net/core/rmem_max 2>/dev/null || echo '?') bytes, VASTRUN_S3_RCVBUF_MIB=${VASTRUN_S3_RCVBUF_MIB:-unset} (docs/performance.md)"
echo
echo "| comparison (A vs B) | pairs | A wall s, median (min–max) | B wall s | A/B wall, median of pairs (min–max) | CPU s A / B (median) | server CPU s A / B (median) | peak RSS A / B | load (1 min) after |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
