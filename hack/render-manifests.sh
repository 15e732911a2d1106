#!/usr/bin/env bash
# Renders everything derived from manifests/ (make manifests):
#   manifests/herald.yaml              one file for `kubectl apply -f`, from
#                                      `kubectl kustomize manifests/base`
#   manifests/herald-prometheus.yaml   the same plus ServiceMonitors and the
#                                      metrics reader binding for Prometheus
#                                      (manifests/prometheus)
#   manifests/herald-metallb-system.yaml  Herald in MetalLB's namespace
#                                      (manifests/metallb-system)
#   charts/herald/files/crds/*.yaml    the CRDs, copied from manifests/crds
#   charts/herald/files/webhook.yaml   `kubectl kustomize manifests/webhook`,
#                                      which the chart's webhook template reads
# Usage: hack/render-manifests.sh [OUTDIR]
# With OUTDIR the same files are written under OUTDIR (OUTDIR/manifests/...,
# OUTDIR/charts/...) and the tree is left untouched; internal/packaging's
# staleness test uses this. The output is deterministic.
# Needs kubectl (1.27+, which embeds kustomize v5); KUBECTL overrides it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kubectl="${KUBECTL:-kubectl}"
out="${1:-$root}"
trap 'rm -f "$out"/manifests/*.yaml.tmp "$out/charts/herald/files/webhook.yaml.tmp"' EXIT

mkdir -p "$out/manifests" "$out/charts/herald/files/crds"
render() { # render KUSTOMIZATION OUTFILE
  {
    echo "# Herald install manifests, rendered by hack/render-manifests.sh from"
    echo "# manifests/$1 (make manifests); do not edit."
    "$kubectl" kustomize "$root/manifests/$1"
  } > "$out/manifests/$2.tmp"
  mv "$out/manifests/$2.tmp" "$out/manifests/$2"
}
render base herald.yaml
render prometheus herald-prometheus.yaml
render metallb-system herald-metallb-system.yaml

rm -f "$out"/charts/herald/files/crds/*.yaml
for f in "$root"/manifests/crds/*.yaml; do
  [[ "$(basename "$f")" == kustomization.yaml ]] && continue
  cp "$f" "$out/charts/herald/files/crds/"
done
{
  echo "# Rendered by hack/render-manifests.sh from manifests/webhook; do not edit."
  "$kubectl" kustomize "$root/manifests/webhook"
} > "$out/charts/herald/files/webhook.yaml.tmp"
mv "$out/charts/herald/files/webhook.yaml.tmp" "$out/charts/herald/files/webhook.yaml"
