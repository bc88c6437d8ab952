#!/usr/bin/env bash
# Prints vastrun's performance figures as one Markdown table. Starts its own
# moto_server for the storage comparison. docs/performance.md records a run.
#   scripts/bench.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
moto_server -H 127.0.0.1 -p "$port" >"$tmp/moto.log" 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null || true; rm -rf "$tmp"' EXIT
for i in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done

# The machine may be shared: a figure means little without the load beside it.
echo "commit $(git rev-parse --short HEAD); load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
go test ./internal/lifecycle -run '^$' -bench . -benchtime 5x > "$tmp/run.txt"
go test ./internal/policy -run '^$' -bench Select10k -benchtime 20x > "$tmp/policy.txt"
VASTRUN_TEST_S3_ENDPOINT="http://127.0.0.1:$port" go test ./internal/storage -run '^$' -bench S3VersusAWSCLI -benchtime 3x > "$tmp/s3.txt"
scripts/bench-interruption.sh 5s 3 > "$tmp/int.txt"

python3 - "$tmp" <<'PY'
import re, sys, statistics
tmp = sys.argv[1]
def metrics(name):
    out = {}
    for line in open(f"{tmp}/{name}.txt"):
        if line.startswith("Benchmark"):
            f = line.split()
            out[f[0]] = f
            for v, unit in zip(f[4::2], f[5::2]):
                out[unit] = float(v)
            out[f[0] + ":ns/op"] = float(f[2])
    return out
r, p, s = metrics("run"), metrics("policy"), metrics("s3")
lat = [float(x) for x in re.findall(r"replacement requested\s+([0-9.]+)", open(f"{tmp}/int.txt").read())]
rows = [
    ("billable: instance running -> test started (incl. polling lag)", f"{r['s-running-to-test']:.3f} s"),
    ("billable: running seen -> test started (vastrun's own work)", f"{r['s-seen-to-test']:.3f} s"),
    ("billable: test ended -> destroy sent", f"{r['s-test-to-destroy']:.4f} s"),
    ("SIGINT during the test -> destroy sent", f"{r['s-sigint-to-destroy']:.4f} s"),
    ("API calls per minute while waiting (30 min load)", f"{r['calls/min']:.1f}"),
    ("policy selection over 10,000 offers", f"{[v for k, v in p.items() if k.endswith(':ns/op')][0]/1e6:.1f} ms"),
    ("checkpoint upload vs aws s3 cp (256 MiB, moto)", f"{s['MiB/s-vastrun-up']:.0f} vs {s['MiB/s-awscli-up']:.0f} MiB/s ({s['up-speedup-vs-awscli']:.2f}x)"),
    ("checkpoint restore (verifying) vs aws s3 cp", f"{s['MiB/s-vastrun-restore']:.0f} vs {s['MiB/s-awscli-down']:.0f} MiB/s ({s['down-speedup-vs-awscli']:.2f}x)"),
    ("interruption -> replacement requested (poll 5 s)", f"median {statistics.median(lat):.2f} s of {len(lat)}" if lat else "n/a"),
]
print("| figure | value |")
print("|---|---|")
for k, v in rows:
    print(f"| {k} | {v} |")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
