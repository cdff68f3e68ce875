#!/usr/bin/env bash
# Installs the system packages rmr builds and tests with. Idempotent: does
# nothing when everything is present. Debian/Ubuntu; needs root (or sudo).
set -euo pipefail
# libpmix-dev: rmr-boot's `pmix` feature (bindgen over <pmix.h>); openmpi-bin:
# mpirun, the launcher the barrier tests run under.
PKGS=(pkg-config clang libclang-dev libfabric-dev libfabric-bin libhwloc-dev libibverbs-dev librdmacm-dev iproute2 python3 libpmix-dev openmpi-bin)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Open MPI refuses more ranks than cores unless told to oversubscribe; CI and
# the dev machines have 2 cores and the barrier runs 8 ranks. Per user, once.
MCA="${HOME:-/root}/.openmpi/mca-params.conf"
if ! grep -qs '^rmaps_base_oversubscribe' "$MCA"; then
  mkdir -p "$(dirname "$MCA")"
  echo 'rmaps_base_oversubscribe = 1' >> "$MCA"
fi
command -v cargo >/dev/null || { echo "setup: cargo not found: install Rust (https://rustup.rs) first" >&2; exit 1; }
