#!/usr/bin/env bash
# Lints the workflows and CI templates users copy: actionlint over the
# release workflow and the GitHub examples (the examples also with
# `uses: vastrun/vastrun@v1` pointed at this checkout, so their inputs are
# checked against action.yml), and a YAML and shell check of the GitLab
# template. Needs actionlint on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v actionlint >/dev/null || { echo "actionlint is not installed" >&2; exit 1; }

actionlint .github/workflows/*.yml examples/github/*.yml

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/.github/workflows"
cp -r action.yml action "$scratch/"
for f in examples/github/*.yml; do
  sed 's#vastrun/vastrun@v1#./#' "$f" >"$scratch/.github/workflows/$(basename "$f")"
done
(cd "$scratch" && git init -q && actionlint)

python3 - examples/github/*.yml .github/workflows/*.yml <<'PY'
import sys, yaml
for path in sys.argv[1:]:
    text = open(path).read()
    doc = yaml.safe_load(text)
    assert "permissions" in doc, f"{path}: no top-level permissions: block (least privilege)"
    assert "@latest" not in text, f"{path}: installs @latest"
    assert "actions/setup-go" not in text or path.startswith(".github/"), f"{path}: the action installs vastrun; no setup-go"
print("workflows: permissions blocks, nothing @latest")
PY

python3 - examples/gitlab/vastrun.gitlab-ci.yml "$scratch" <<'PY'
import os, subprocess, sys, yaml
path, scratch = sys.argv[1:]
text = open(path).read()
doc = yaml.safe_load(text)
job = doc[".vastrun-gpu"]
for key in ("image", "before_script", "script", "after_script", "artifacts"):
    assert key in job, f"{path}: .vastrun-gpu has no {key}"
assert "@latest" not in text, f"{path}: installs @latest"
assert "GitLab 17.0" in text, f"{path}: does not state the GitLab version after_script-on-cancel needs"
v = job["variables"]
assert v["VASTRUN_VERSION"].count(".") == 2, "VASTRUN_VERSION must pin X.Y.Z"
after = "\n".join(job["after_script"])
assert "VASTRUN_DOTENV" in after and "vastrun.env\"" not in after.replace("${VASTRUN_DOTENV:-vastrun.env}", ""), "after_script must read $VASTRUN_DOTENV"
assert "CI_JOB_STATUS" in after, "after_script must skip the label sweep after a success"
assert job["artifacts"]["reports"]["dotenv"] == v["VASTRUN_DOTENV"], "reports:dotenv and VASTRUN_DOTENV differ"
for part in ("before_script", "script", "after_script"):
    f = os.path.join(scratch, part + ".sh")
    open(f, "w").write("\n".join(job[part]) + "\n")
    subprocess.run(["sh", "-n", f], check=True)
print("gitlab template: valid YAML, shell blocks parse, pinned, VASTRUN_DOTENV honoured")
PY
