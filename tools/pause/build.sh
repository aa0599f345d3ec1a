#!/usr/bin/env bash
# Builds the real nodes' two static programs (pause and hello, standard library only) into DEST (default: what
# `python -m testbed.controlplane.assets --tool pause` names). testbed.controlplane.nodes.images packs each into an OCI image
# archive that the nodes' containerd imports: no container registry is reachable from these machines.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: build.sh DEST}"
mkdir -p "$dest.partial"
# static: the image holds the binary alone (FROM scratch), no libc to link against
export CGO_ENABLED=0

cd "$here"
go build -trimpath -ldflags "-s -w" -o "$dest.partial/pause" .
go build -trimpath -ldflags "-s -w" -o "$dest.partial/hello" ./hello

# complete or absent: a build that fails half-way leaves nothing a later run could take for finished
rm -rf "$dest"
mv "$dest.partial" "$dest"
