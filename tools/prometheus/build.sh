#!/usr/bin/env bash
# Builds prometheus (github.com/prometheus/prometheus/cmd/prometheus) from the Go module proxy into DEST (default: what
# `python -m testbed.controlplane.assets --tool prometheus` names), at the version the go.mod beside this script pins.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: build.sh DEST}"
mkdir -p "$dest.partial"
export CGO_ENABLED=0

cd "$here"
version="$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)"
# without the builtinassets tag the web UI's files are not embedded (they are built by npm, not in the module):
# the HTTP API the controller queries is all the tests use
go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
  -o "$dest.partial/prometheus" github.com/prometheus/prometheus/cmd/prometheus

# complete or absent: a build that fails half-way leaves nothing a later run could take for finished
rm -rf "$dest"
mv "$dest.partial" "$dest"
