#!/usr/bin/env bash
# Runs golangci-lint with the repository's .golangci.yml. The version is
# pinned here, next to the config written for it: a newer release may add
# checks to a linter and fail a tree nobody changed.
set -euo pipefail
cd "$(dirname "$0")/.."

version=v2.15.0
toolbin="${VASTRUN_CI_TOOLS:-$HOME/.cache/vastrun-ci/bin}"
lint="$toolbin/golangci-lint"
if ! "$lint" version 2>/dev/null | grep -q "version ${version#v} "; then
  mkdir -p "$toolbin"
  GOBIN="$toolbin" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version" \
    || { echo "golangci-lint $version could not be installed: the tree cannot be linted" >&2; exit 1; }
fi
if [ $# -eq 0 ]; then set -- ./...; fi
# Another golangci-lint on this machine (an editor, a second clone's CI)
# would otherwise fail this one: "parallel golangci-lint is running".
exec "$lint" run --allow-parallel-runners "$@"
