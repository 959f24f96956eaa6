#!/usr/bin/env bash
# Installs the Debian 12 packages pileprep builds and tests with. Idempotent: installs only what is missing.
#
#   scripts/setup.sh               the packages below
#   scripts/setup.sh PACKAGE...    those, and these too (scripts/bench.sh: nodejs npm for the tiktoken peer)
set -euo pipefail

# time: GNU time (/usr/bin/time), which the CLI tests and scripts/bench.sh read peak RSS from; not in
# a minimal Debian 12 (a container image, debootstrap). ca-certificates: the CA bundle libcurl verifies
# https:// downloads with (the default --url is one); libcurl4 only recommends it, and recommends are
# not installed here, so a fresh debootstrap had none and every HTTPS shard failed.
PACKAGES=(
  build-essential cmake pkg-config ninja-build zstd openssl time ca-certificates
  libzstd-dev libsimdjson-dev libtbb-dev libre2-dev libcurl4-openssl-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-numpy python3-regex
  "$@"
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
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null; then
    echo "setup: installing Debian packages needs root: run this as root, or install sudo, or install" \
         "them yourself: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  SUDO="sudo"
fi
# Through env: sudo's default env_reset would drop an exported DEBIAN_FRONTEND, and the proxy
# variables a network that needs one sets (apt-get reads http_proxy).
apt_env=(env DEBIAN_FRONTEND=noninteractive)
for v in http_proxy https_proxy HTTP_PROXY HTTPS_PROXY no_proxy NO_PROXY; do
  if [[ -n ${!v:-} ]]; then apt_env+=("$v=${!v}"); fi
done
# A package run interrupted earlier (Ctrl-C during an install) leaves dpkg half done, and apt-get
# refuses to install until it is finished.
if [[ -n $(dpkg --audit 2>/dev/null) ]]; then $SUDO "${apt_env[@]}" dpkg --configure -a; fi
$SUDO "${apt_env[@]}" apt-get update -qq
$SUDO "${apt_env[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
