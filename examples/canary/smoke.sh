#!/bin/sh
# The canary smoke contract: the same command runs locally (VASTRUN_DEVICE=cpu)
# and on the rented GPU (VASTRUN_DEVICE=gpu). It exits non-zero on failure and
# writes a JSON object to $VASTRUN_RESULT; vastrun compares the two field by field.
set -eu
device=${VASTRUN_DEVICE:-cpu}
# The "model": a deterministic computation both devices must agree on.
checksum=$(seq 1 1000 | awk '{ s += $1 * $1 } END { print s }')
gpus=0
if [ "$device" = gpu ]; then
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
  [ "$gpus" -ge 1 ] || { echo "no GPU visible" >&2; exit 1; }
fi
printf '{"device": "%s", "gpus": %d, "checksum": %s, "precision": "%s"}\n' \
  "$device" "$gpus" "$checksum" "${SMOKE_PRECISION:-fp32}" > "${VASTRUN_RESULT:-/dev/stdout}"
echo "smoke ok on $device"
