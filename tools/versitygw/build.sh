#!/usr/bin/env bash
# Builds versitygw (github.com/versity/versitygw/cmd/versitygw) from the Go module proxy into DEST (default: what
# `python -m testbed.controlplane.assets --tool versitygw` names), at the version the go.mod beside this script pins.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: build.sh DEST}"
mkdir -p "$dest.partial"
export CGO_ENABLED=0

cd "$here"
version="$(go list -m -f '{{.Version}}' github.com/versity/versitygw)"
go build -trimpath -ldflags "-s -w -X main.Version=$version" -o "$dest.partial/versitygw" \
  github.com/versity/versitygw/cmd/versitygw

# complete or absent: a build that fails half-way leaves nothing a later run could take for finished
rm -rf "$dest"
mv "$dest.partial" "$dest"
