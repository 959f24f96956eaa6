#!/usr/bin/env bash
# Installs the Debian 12 packages pileprep builds and tests with. Idempotent: installs only what is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config ninja-build zstd openssl
  libzstd-dev libsimdjson-dev libtbb-dev libre2-dev libcurl4-openssl-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-numpy python3-regex
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
