#!/usr/bin/env bash
# Herald's lab: `hack/lab.sh up|down|status|diagnose|kubectl ARGS...|restart-speaker|
# stop-speaker|start-speaker [--kill] NODE`, a thin wrapper around e2e/cmd/herald-lab
# (built into bin/herald-lab). The lab's state
# (logs, kubeconfigs, etcd data) lives in $HERALD_LAB_DIR, default <repo>/.lab.
# kubectl (for `up` and `kubectl`) is $KUBECTL, else bin/k8s/kubectl (built by
# `make test-assets`), else the one on PATH: see e2e/lab.KubectlPath.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export HERALD_LAB_DIR=${HERALD_LAB_DIR:-$root/.lab}
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$root/bin/k8s}
if [[ -z "${KUBECTL:-}" && -x "$root/bin/k8s/kubectl" ]]; then
  export KUBECTL=$root/bin/k8s/kubectl
fi
bin="$root/bin/herald-lab"
# Rebuild when any of its sources is newer than the binary (cheap: Go caches).
if [[ ! -x "$bin" ]] || [[ -n "$(find e2e/lab e2e/cmd/herald-lab go.mod go.sum -newer "$bin" -print -quit)" ]]; then
  go build -o "$bin" ./e2e/cmd/herald-lab
fi
case "${1:-}" in
  up|down|status|kubectl|diagnose|restart-speaker|stop-speaker|start-speaker) exec "$bin" "$@" ;;
  *) echo "usage: hack/lab.sh up|down|status|diagnose|kubectl ARGS...|restart-speaker [--kill] NODE|stop-speaker [--kill] NODE|start-speaker NODE" >&2; exit 2 ;;
esac
