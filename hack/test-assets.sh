#!/usr/bin/env bash
# Builds the real Kubernetes binaries (kube-apiserver, etcd, kubectl) from
# their Go modules (hack/tools/k8s) into bin/k8s: the folder controller-runtime's
# envtest reads through KUBEBUILDER_ASSETS, and the kubectl that the packaging
# tests, the e2e lab and hack/lab.sh use (KUBECTL overrides it). No prebuilt
# binary is downloaded. A binary is rebuilt when it is missing or when
# hack/tools/k8s/go.mod or go.sum changed since the last build (a stamp file
# records their hash), so an older bin/k8s without kubectl only gets kubectl.
# A cold build takes 10–25 minutes on 2 shared cores (kubectl: a few more).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/k8s"
tools="$root/hack/tools/k8s"
stamp="$out/.stamp"
want=$(cat "$tools/go.mod" "$tools/go.sum" | sha256sum | cut -d' ' -f1)
fresh=false
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  fresh=true
fi
# need NAME: true when bin/k8s/NAME must be (re)built.
need() { ! $fresh || [[ ! -x "$out/$1" ]]; }
if ! need kube-apiserver && ! need etcd && ! need kubectl; then
  exit 0
fi
mkdir -p "$out"
kver=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$tools/go.mod")
minor=$(echo "$kver" | cut -d. -f2)
# The version kube-apiserver and kubectl report (`kubectl version`), as the
# Kubernetes release build sets it (hack/lib/version.sh there).
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
done
cd "$tools"
# A stale stamp means every binary is rebuilt; remove it first so that an
# interrupted build is not taken for a fresh one.
$fresh || rm -f "$stamp"
if need kube-apiserver; then
  echo "test-assets: building kube-apiserver $kver from Go modules (cold: 10–20 min on 2 cores)" >&2
  go build -trimpath -ldflags "$ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
fi
if need etcd; then
  echo "test-assets: building etcd from Go modules" >&2
  go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
fi
if need kubectl; then
  echo "test-assets: building kubectl $kver from Go modules" >&2
  go build -trimpath -ldflags "$ldflags" -o "$out/kubectl" k8s.io/kubernetes/cmd/kubectl
fi
echo "$want" > "$stamp"
