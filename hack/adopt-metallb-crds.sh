#!/usr/bin/env bash
# Hands the metallb.io CRDs that a MetalLB install created (its Helm chart's
# crds subchart, or metallb-native.yaml) over to Herald's Helm release, so
# that `helm install` of charts/herald does not fail Helm's ownership check
# ("... exists and cannot be imported into the current release: invalid
# ownership metadata") and so that removing MetalLB keeps them, and with
# them every pool, peer and advertisement (docs/migrating-from-metallb.md,
# "With Helm").
#
# Usage: hack/adopt-metallb-crds.sh [RELEASE [NAMESPACE]]
#   RELEASE    Herald's Helm release name (default herald)
#   NAMESPACE  the namespace Herald is installed in (default herald-system)
# Needs kubectl (KUBECTL overrides it) reaching the cluster (KUBECONFIG).
# For each metallb.io CRD it sets what Helm checks before adopting an
# object: the label app.kubernetes.io/managed-by=Helm and the annotations
# meta.helm.sh/release-name and meta.helm.sh/release-namespace; and
# helm.sh/resource-policy=keep, which stops `helm upgrade` of MetalLB's
# release from deleting them once they leave it (crds.enabled=false).
set -euo pipefail
release="${1:-herald}"
namespace="${2:-herald-system}"
kubectl="${KUBECTL:-kubectl}"
crds=(bfdprofiles bgpadvertisements bgppeers communities configurationstates ipaddresspools l2advertisements servicebgpstatuses servicel2statuses)
for c in "${crds[@]}"; do
  crd="$c.metallb.io"
  if ! "$kubectl" get crd "$crd" -o name >/dev/null 2>&1; then
    echo "adopt-metallb-crds: $crd does not exist; the chart will create it" >&2
    continue
  fi
  "$kubectl" annotate crd "$crd" --overwrite \
    helm.sh/resource-policy=keep \
    meta.helm.sh/release-name="$release" \
    meta.helm.sh/release-namespace="$namespace"
  "$kubectl" label crd "$crd" --overwrite app.kubernetes.io/managed-by=Helm
done
