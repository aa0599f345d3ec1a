#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v4/cmd/helm) from the Go module proxy into DEST (default: what
# `python -m testbed.controlplane.assets --tool helm` names), at the version the go.mod beside this script pins.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: build.sh DEST}"
mkdir -p "$dest.partial"
export CGO_ENABLED=0

cd "$here"
version="$(go list -m -f '{{.Version}}' helm.sh/helm/v4)"
# what `helm version` reports (helm's own Makefile sets the same; without it a build says only "v4.3")
go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" -o "$dest.partial/helm" \
  helm.sh/helm/v4/cmd/helm

# complete or absent: a build that fails half-way leaves nothing a later run could take for finished
rm -rf "$dest"
mv "$dest.partial" "$dest"
