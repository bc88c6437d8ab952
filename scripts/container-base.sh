#!/usr/bin/env bash
# Makes a container base image with no registry: a rootfs of Debian's
# busybox-static (one static binary and its applet links), imported into
# podman under the given name (default: the name examples/canary/Containerfile
# builds FROM). Prints the image id.
#   scripts/container-base.sh [NAME]
set -euo pipefail
name=${1:-docker.io/library/busybox:1.36.1}
bb=$(command -v busybox || true)
[ -n "$bb" ] || { echo "busybox is not installed (apt-get install busybox-static)" >&2; exit 1; }
if ldd "$bb" >/dev/null 2>&1; then
  echo "$bb is dynamically linked; the rootfs needs busybox-static" >&2; exit 1
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/rootfs/bin" "$root/rootfs/tmp" "$root/rootfs/etc"
cp "$bb" "$root/rootfs/bin/busybox"
for a in $("$bb" --list); do
  [ "$a" = busybox ] || ln -s busybox "$root/rootfs/bin/$a"
done
echo 'root:x:0:0:root:/:/bin/sh' > "$root/rootfs/etc/passwd"
tar -C "$root/rootfs" -cf "$root/rootfs.tar" .
podman import --quiet "$root/rootfs.tar" "$name"
