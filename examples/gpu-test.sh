#!/bin/sh
# The GPU acceptance test vastrun runs on the rented instance.
# It must exit non-zero on failure; it may write a JSON result to $VASTRUN_RESULT.
set -eu
echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
count=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
[ "$count" -ge 1 ] || { echo "no GPU visible" >&2; exit 1; }
cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p')
echo "== CUDA $cuda"
printf '{"gpus": %d, "cuda": "%s", "checks_passed": 2}\n' "$count" "$cuda" > "$VASTRUN_RESULT"
echo "ok"
