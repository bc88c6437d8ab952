#!/usr/bin/env bash
# Cost of the README training example on demand vs interruptible, on the
# simulator's seeded moving market, with the number of interruptions, in one
# run (BenchmarkBidsTrainExample; figures in docs/performance.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
go test ./test/chaos/ -run '^$' -bench BenchmarkBidsTrainExample -benchtime 1x | grep -E '^bids:|^Benchmark'
