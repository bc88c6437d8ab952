#!/usr/bin/env bash
# Builds a snapshot release with GoReleaser from .goreleaser.yaml and checks
# it: every archive is listed in checksums.txt with the right SHA-256, each
# holds a static vastrun plus LICENSE/README/CHANGELOG, and the host's binary
# reports the snapshot's version, the commit and a date.
#
#   scripts/release-snapshot.sh DIST [all|host]
#
# DIST receives GoReleaser's output (an absolute path outside the work tree,
# or the ignored dist/). "host" builds only the runner's own OS/arch, to save
# CI time; the configuration itself always lists all four targets.
#
# It builds the committed HEAD from a local clone, as a release would: the
# clone has a remote (GoReleaser reads the commit only when one exists) and
# no untracked files.
set -euo pipefail
cd "$(dirname "$0")/.."
dist=${1:?usage: release-snapshot.sh DIST [all|host]}
targets=${2:-all}
case "$dist" in /*) ;; *) dist="$PWD/$dist" ;; esac
command -v goreleaser >/dev/null || { echo "goreleaser is not installed" >&2; exit 1; }

hostos=$(go env GOOS) hostarch=$(go env GOARCH)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git clone -q "$PWD" "$scratch/src"
cd "$scratch/src"
cfg="$scratch/goreleaser.yaml"
# A derived configuration: the same file with dist moved (and, for "host",
# the target list narrowed). Nothing else changes.
python3 - .goreleaser.yaml "$cfg" "$dist" "$targets" "$hostos" "$hostarch" <<'PY'
import sys, yaml
src, out, dist, targets, goos, goarch = sys.argv[1:]
c = yaml.safe_load(open(src))
c["dist"] = dist
if targets == "host":
    for b in c["builds"]:
        b["goos"], b["goarch"] = [goos], [goarch]
elif targets != "all":
    sys.exit(f"targets must be all or host, not {targets!r}")
yaml.safe_dump(c, open(out, "w"), sort_keys=False)
PY

goreleaser check -f "$cfg" >/dev/null 2>&1 || goreleaser check -f "$cfg"
goreleaser release --snapshot --clean -f "$cfg" --parallelism 2 >"$dist.log" 2>&1 || { cat "$dist.log" >&2; exit 1; }

version=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$dist/metadata.json")
want="linux_amd64 linux_arm64 darwin_amd64 darwin_arm64"
[ "$targets" = host ] && want="${hostos}_${hostarch}"
(cd "$dist" && sha256sum --quiet --strict -c checksums.txt)
listed=$(wc -l <"$dist/checksums.txt")
set -- $want
[ "$listed" -eq $# ] || { echo "checksums.txt lists $listed files, want $#" >&2; exit 1; }
for t in $want; do
  a="vastrun_${version}_${t}.tar.gz"
  grep -q "  $a\$" "$dist/checksums.txt" || { echo "checksums.txt does not list $a" >&2; exit 1; }
  got=$(tar -tzf "$dist/$a" | sort | tr '\n' ' ')
  [ "$got" = "CHANGELOG.md LICENSE README.md vastrun " ] || { echo "$a holds: $got" >&2; exit 1; }
done

x="$scratch/x"
mkdir "$x"
tar -xzf "$dist/vastrun_${version}_${hostos}_${hostarch}.tar.gz" -C "$x" vastrun
go version -m "$x/vastrun" | grep -q 'CGO_ENABLED=0' || { echo "the binary is not static (CGO_ENABLED)" >&2; exit 1; }
"$x/vastrun" version --json >"$x/v.json"
python3 - "$x/v.json" "$version" "$(git rev-parse HEAD)" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
assert v["schema"] == "vastrun.version/v1", v
assert v["version"] == sys.argv[2], (v["version"], sys.argv[2])
assert v["commit"] == sys.argv[3], (v["commit"], sys.argv[3])
assert v.get("date"), v
print(f"release snapshot {v['version']}: commit {v['commit'][:12]}, date {v['date']}")
PY
"$x/vastrun" version
echo "archives: $want; checksums.txt verified"
