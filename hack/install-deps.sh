#!/usr/bin/env bash
# Installs the Debian packages Herald's tests and lab use: network tools for the
# namespaces (iproute2, arping, ndisc6, tcpdump, curl), FRR as the BGP router,
# Prometheus and promtool (the alerts' unit tests), Graphviz (`dot`: make
# diagrams and the diagrams' staleness test), and a C toolchain (gcc,
# libc6-dev): `go test -race` (make race) needs cgo. Idempotent: does nothing
# when all are present.
#
# The lab runs its own FRR and Prometheus instances inside its namespaces; it
# needs the packages, not their system-wide services. So the packages' services
# are kept from starting while apt-get runs: a policy-rc.d (Debian policy,
# invoke-rc.d(8) and deb-systemd-invoke honour it) answers 101 "action
# forbidden" for the duration of apt-get and is removed again (an existing one
# is put back unchanged). Nothing is stopped or killed afterwards: services a
# machine already runs (its own frr, prometheus, ...) are never touched, and a
# run with every package present changes nothing at all.
#
# A policy-rc.d that a run killed during apt-get left behind is replaced by
# the machine's own again (or removed) on the next run. HERALD_POLICY_RC_D
# overrides the policy-rc.d path (tests only).
set -euo pipefail
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in iproute2 arping ndisc6 iputils-ping curl tcpdump frr prometheus graphviz openssl procps psmisc gcc libc6-dev; do
  have "$p" || need+=("$p")
done
policy=${HERALD_POLICY_RC_D:-/usr/sbin/policy-rc.d}
marker="# hack/install-deps.sh: no service starts while it installs packages."
# A policy left by a run that was killed during apt-get: put the machine's
# own back (or none) before anything else.
if [[ -f $policy ]] && grep -qxF "$marker" "$policy"; then
  left=("$policy".herald.*)
  if [[ -e ${left[0]} ]]; then
    mv -f "${left[0]}" "$policy"
  else
    rm -f "$policy"
  fi
fi
((${#need[@]})) || exit 0

saved=""
restore() {
  if [[ -n $saved ]]; then
    mv -f "$saved" "$policy"
  else
    rm -f "$policy"
  fi
}
if [[ -e $policy ]]; then
  saved=$(mktemp "$policy.herald.XXXXXX")
  cp -p "$policy" "$saved"
fi
trap restore EXIT
printf '#!/bin/sh\n%s\nexit 101\n' "$marker" >"$policy"
chmod 0755 "$policy"

echo "install-deps: apt-get install ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
