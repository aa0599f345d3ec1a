#!/usr/bin/env bash
# Builds the Kubeflow training operator (github.com/kubeflow/training-operator/cmd/training-operator.v1) from the Go
# module proxy into DEST (default: what `python -m testbed.controlplane.assets --tool training-operator` names), at
# the version the go.mod beside this script pins, with the ClusterRole of that release's manifests beside it
# (`role.yaml`: what the operator may do, as its own kustomize base grants it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: build.sh DEST}"
mkdir -p "$dest.partial"
export CGO_ENABLED=0

cd "$here"
go build -trimpath -ldflags "-s -w" -o "$dest.partial/training-operator" \
  github.com/kubeflow/training-operator/cmd/training-operator.v1
source="$(go list -m -f '{{.Dir}}' github.com/kubeflow/training-operator)"
install -m 0644 "$source/manifests/base/rbac/role.yaml" "$dest.partial/role.yaml"

# complete or absent: a build that fails half-way leaves nothing a later run could take for finished
rm -rf "$dest"
mv "$dest.partial" "$dest"
