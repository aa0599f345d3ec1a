#!/usr/bin/env bash
# Builds the kubelet (k8s.io/kubernetes/cmd/kubelet) from the Go module proxy into DEST (default: what
# `python -m testbed.controlplane.assets --tool kubelet` names), at the release the go.mod beside this script pins: the
# same k8s.io/kubernetes as tools/kube/kubernetes (a node of the control plane's own release, no version skew), kept
# apart so that building the kubelet never changes the control plane's cache digest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: build.sh DEST}"
mkdir -p "$dest.partial"
# static: the kubelet runs on the host, and the test bed's nodes need no cgo (no cadvisor libpfm, no systemd journal)
export CGO_ENABLED=0

cd "$here"
version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
minor="$(echo "$version" | cut -d. -f2)"
# what `kubelet --version` and the Node's status.nodeInfo.kubeletVersion report (the release's own build sets the same)
stamp="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1"
stamp+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$version"
go build -trimpath -ldflags "-s -w $stamp" -o "$dest.partial/kubelet" k8s.io/kubernetes/cmd/kubelet

# complete or absent: a build that fails half-way leaves nothing a later run could take for finished
rm -rf "$dest"
mv "$dest.partial" "$dest"
