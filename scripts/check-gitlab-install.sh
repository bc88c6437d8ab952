#!/usr/bin/env bash
# Runs the GitLab template's before_script (examples/gitlab/vastrun.gitlab-ci.yml)
# against a local HTTP server serving the snapshot release in DIST, as GitHub
# serves releases/download/vX.Y.Z/: it must install a vastrun that reports
# the snapshot's version, and refuse a tampered archive and a wrong
# VASTRUN_SHA256 pin without installing anything.
#
#   scripts/check-gitlab-install.sh DIST
set -euo pipefail
cd "$(dirname "$0")/.."
dist=${1:?usage: check-gitlab-install.sh DIST}
version=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$dist/metadata.json")
scratch=$(mktemp -d)
srvpid=
trap '[ -n "$srvpid" ] && kill "$srvpid" 2>/dev/null; rm -rf "$scratch"' EXIT

python3 - examples/gitlab/vastrun.gitlab-ci.yml "$scratch/before.sh" <<'PY'
import sys, yaml
job = yaml.safe_load(open(sys.argv[1]))[".vastrun-gpu"]
open(sys.argv[2], "w").write("\n".join(job["before_script"]) + "\n")
PY

mkdir -p "$scratch/www/good" "$scratch/www/tampered"
ln -s "$(cd "$dist" && pwd)" "$scratch/www/good/v$version"
mkdir "$scratch/www/tampered/v$version"
cp "$dist"/checksums.txt "$dist"/*.tar.gz "$scratch/www/tampered/v$version/"
for a in "$scratch/www/tampered/v$version"/*.tar.gz; do
  python3 - "$a" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0xFF; open(p, "wb").write(b)
PY
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$scratch/www" >"$scratch/http.log" 2>&1 &
srvpid=$!
for i in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
curl -s -o /dev/null "http://127.0.0.1:$port/" || { echo "the release server did not start" >&2; cat "$scratch/http.log" >&2; exit 1; }

install() { # LAYOUT BINDIR [SHA256]
  mkdir -p "$2"
  env VASTRUN_VERSION="$version" VASTRUN_RELEASE_URL="http://127.0.0.1:$port/$1" VASTRUN_BIN_DIR="$2" \
    VASTRUN_SHA256="${3:-}" sh "$scratch/before.sh"
}

install good "$scratch/bin" >"$scratch/good.log" 2>&1 || { cat "$scratch/good.log" >&2; exit 1; }
"$scratch/bin/vastrun" version --json | grep -q "\"version\": \"$version\"" \
  || { echo "the template installed a vastrun that does not report $version" >&2; exit 1; }

if install tampered "$scratch/bin-tampered" >"$scratch/tampered.log" 2>&1; then
  echo "the template installed a tampered archive:" >&2; cat "$scratch/tampered.log" >&2; exit 1
fi
grep -q 'FAILED' "$scratch/tampered.log" || { echo "tampered archive refused for the wrong reason:" >&2; cat "$scratch/tampered.log" >&2; exit 1; }
[ ! -e "$scratch/bin-tampered/vastrun" ] || { echo "a tampered vastrun was unpacked" >&2; exit 1; }

if install good "$scratch/bin-pin" "$(printf '0%.0s' $(seq 64))" >"$scratch/pin.log" 2>&1; then
  echo "the template ignored a wrong VASTRUN_SHA256 pin" >&2; exit 1
fi
[ ! -e "$scratch/bin-pin/vastrun" ] || { echo "a vastrun failing its SHA-256 pin was unpacked" >&2; exit 1; }
echo "gitlab template install: $version verified and installed; tampered archive and wrong pin refused"
