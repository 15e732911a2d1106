#!/usr/bin/env bash
# Installs the Debian packages Herald's tests and lab use: network tools for the
# namespaces (iproute2, arping, ndisc6, tcpdump, curl), FRR as the BGP router,
# Prometheus and promtool. Idempotent: does nothing when all are present.
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in iproute2 arping ndisc6 iputils-ping curl tcpdump frr prometheus openssl procps psmisc; do
  have "$p" || need+=("$p")
done
if ((${#need[@]})); then
  echo "install-deps: apt-get install ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The Debian packages start system-wide services; the lab runs its own
# instances inside namespaces, so keep the global ones stopped.
for svc in frr prometheus prometheus-node-exporter; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    systemctl stop "$svc" || true
  fi
done
pkill -x -f '/usr/bin/prometheus.*' 2>/dev/null || true
exit 0
