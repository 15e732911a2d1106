#!/usr/bin/env bash
# Builds the real Kubernetes test binaries (kube-apiserver, etcd) from their Go
# modules into bin/k8s, the folder controller-runtime's envtest reads through
# KUBEBUILDER_ASSETS. No prebuilt binary is downloaded. The build is reused as
# long as hack/tools/k8s/go.mod and go.sum are unchanged (a stamp file records
# their hash). A cold build takes 10–25 minutes on 2 shared cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/k8s"
tools="$root/hack/tools/k8s"
stamp="$out/.stamp"
want=$(cat "$tools/go.mod" "$tools/go.sum" | sha256sum | cut -d' ' -f1)
if [[ -x "$out/kube-apiserver" && -x "$out/etcd" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
mkdir -p "$out"
kver=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$tools/go.mod")
minor=$(echo "$kver" | cut -d. -f2)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
echo "test-assets: building kube-apiserver $kver and etcd from Go modules (cold: 10–25 min on 2 cores)" >&2
cd "$tools"
go build -trimpath -ldflags "$ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
echo "$want" > "$stamp"
