#!/usr/bin/env bash
# Builds the local control plane from the Go module proxy into DEST (default: what `python -m testbed.controlplane.assets`
# names): kube-apiserver, kube-controller-manager, kube-scheduler and a kubectl of the same release
# (k8s.io/kubernetes), etcd (go.etcd.io/etcd/server/v3) and kwok (sigs.k8s.io/kwok), at the versions the go.mod files
# beside this script pin.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:?usage: build.sh DEST}"
mkdir -p "$dest.partial"
export CGO_ENABLED=0
flags=(-trimpath)

cd "$here/kubernetes"
version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
minor="$(echo "$version" | cut -d. -f2)"
# what `kube-apiserver --version` and the /version endpoint report (the release's own build sets the same)
stamp="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1"
stamp+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$version"
go build "${flags[@]}" -ldflags "-s -w $stamp" -o "$dest.partial/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl

cd "$here/etcd"
go build "${flags[@]}" -ldflags "-s -w" -o "$dest.partial/etcd" go.etcd.io/etcd/server/v3

cd "$here/kwok"
go build "${flags[@]}" -ldflags "-s -w" -o "$dest.partial/kwok" sigs.k8s.io/kwok/cmd/kwok
# kwok's own stages at the same version: nodes become Ready and keep a Lease, pods on them Running, deletions
# confirmed. Its pod-complete stage is left out: it finishes every pod owned by a kind named Job, Volcano's
# included, and the cluster twin finishes its jobs' pods itself.
stages="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready \
  pod/fast/pod-delete; do
  printf -- '---\n'
  cat "$stages/$stage.yaml"
done > "$dest.partial/kwok-stages.yaml"

# complete or absent: a build that fails half-way leaves nothing a later run could take for finished
rm -rf "$dest"
mv "$dest.partial" "$dest"
