#!/usr/bin/env bash
# Installs the system packages rmr builds and tests with. Idempotent: does
# nothing when everything is present. Debian/Ubuntu; needs root (or sudo).
set -euo pipefail
PKGS=(pkg-config clang libclang-dev libfabric-dev libfabric-bin libhwloc-dev libibverbs-dev librdmacm-dev iproute2 python3)
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
command -v cargo >/dev/null || { echo "setup: cargo not found: install Rust (https://rustup.rs) first" >&2; exit 1; }
