#!/usr/bin/env bash
# Builds oneTBB's libtbb with -fsanitize=thread, for scripts/test.sh --tsan, and prints the
# directory holding its TBBConfig.cmake (the only line on stdout; pass it as TBB_DIR).
#
# Debian's libtbb12 is not instrumented, so ThreadSanitizer cannot see the synchronisation inside
# TBB's scheduler and reports every hand-off between pipeline stages as a race. This rebuilds the
# very same library from Debian's own source package (the version of the installed libtbb-dev,
# Debian's patches applied) with ThreadSanitizer, and installs it outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/pileprep/tbb-tsan-<version>   (lib/libtbb.so.12, lib/cmake/TBB)
#
# Only libtbb: no tests, examples, tbbmalloc or hwloc binding. Leaving tbbmalloc out matters: libtbb
# loads libtbbmalloc.so.2 only from its own directory, so without it TBB's allocations go through
# malloc, which TSan intercepts (an uninstrumented allocator reusing memory would look like races).
#
# Idempotent: when the install is there, built from the same version with the same compiler and
# flags (its stamp file says so), it only prints the directory. The first run needs apt (root or
# sudo) when no deb-src entry is configured: it adds /etc/apt/sources.list.d/pileprep-src.sources
# (pileprep-src.list for one-line sources.list setups) with the Debian URIs and suites already in
# use, runs apt-get update, and downloads the source with apt-get source. About half a minute on
# 2 cores, download included.
#
# Environment: CXX (default c++; must be the compiler of the --tsan build: one TSan runtime per
# process), TSAN_TBB_JOBS (default nproc), XDG_CACHE_HOME.
set -euo pipefail

die() { echo "build_tsan_tbb: $*" >&2; exit 1; }

cxx=${CXX:-c++}
command -v "$cxx" >/dev/null || die "no C++ compiler '$cxx' (set CXX)"
# The source package the installed libtbb-dev was built from (onetbb; its version, which differs
# from the binary's after a binNMU).
read -r srcpkg version < <(dpkg-query -W -f='${source:Package} ${source:Version}\n' libtbb-dev 2>/dev/null) ||
  true
[[ -n ${version:-} ]] || die "libtbb-dev is not installed (scripts/setup.sh installs it)"
cache_root=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/pileprep
prefix=$cache_root/tbb-tsan-$version
config_dir=$prefix/lib/cmake/TBB
stamp_file=$prefix/pileprep-build-stamp
flags="-O1 -g -fno-omit-frame-pointer"
# What the install must have been built from; any difference rebuilds it.
cxx_id=$("$cxx" --version | sed -n 1p) || die "'$cxx --version' failed"
stamp="$srcpkg $version; $cxx_id; TBB_SANITIZE=thread; $flags"

is_current() { [[ -f $config_dir/TBBConfig.cmake && -f $stamp_file && $(<"$stamp_file") == "$stamp" ]]; }
if is_current; then echo "$config_dir"; exit 0; fi

mkdir -p "$cache_root"
# Two concurrent test runs must not build into the same prefix.
exec 9>"$cache_root/tbb-tsan.lock"
flock 9
if is_current; then echo "$config_dir"; exit 0; fi

work=$(mktemp -d -t pileprep-tbb-tsan.XXXXXX)  # in $TMPDIR, else /tmp
trap 'rm -rf "$work"' EXIT
log=$work/log
# Runs one step with its output in the log; on failure shows the log's end and stops.
step() {
  local what=$1; shift
  if ! "$@" >>"$log" 2>&1; then
    echo "build_tsan_tbb: $what failed: $*" >&2
    tail -n 40 "$log" >&2
    trap - EXIT
    echo "build_tsan_tbb: the whole log and the build tree are kept in $work" >&2
    exit 1
  fi
}

SUDO=""
# Not root and no sudo: a step that needs root fails saying so (only the steps that change the
# system's package configuration do).
need_root() {
  echo "build_tsan_tbb: this step needs root (run as root, or install sudo): $*" >&2
  return 1
}
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else SUDO="need_root"; fi
fi
export DEBIAN_FRONTEND=noninteractive

has_source() { [[ $'\n'$(apt-cache showsrc --only-source "$srcpkg" 2>/dev/null)$'\n' == *$'\nVersion: '"$version"$'\n'* ]]; }

# deb-src entries for the Debian archives already configured (same URIs, suites and components).
# Only stanzas with the release's own suites and a Debian URI: third-party repositories (nodesource,
# ...) carry no sources and would make apt-get update fail.
add_deb_src() {
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [[ -n $codename ]] || die "cannot tell the Debian release (no VERSION_CODENAME in /etc/os-release)"
  local f out list=/etc/apt/sources.list.d/pileprep-src.sources
  out=$(for f in /etc/apt/sources.list.d/*.sources; do
          [[ -f $f && $f != "$list" ]] || continue
          awk -v RS= -v ORS='\n\n' -v codename="$codename" '
            /(^|\n)Types:[^\n]*(^|[ \t])deb([ \t]|\n|$)/ &&
            /(^|\n)URIs:[^\n]*debian/ &&
            match($0, /(^|\n)Suites:[^\n]*/) &&
            (" " substr($0, RSTART, RLENGTH) " ") ~ ("[ \t]" codename "(-[a-z]+)?[ \t\n]") {
              n = split($0, lines, "\n"); s = ""
              for (i = 1; i <= n; i++) {
                if (lines[i] ~ /^#/) continue
                if (lines[i] ~ /^Types:/) lines[i] = "Types: deb-src"
                s = s lines[i] "\n"
              }
              printf "%s\n", s
            }' "$f"
        done)
  if [[ -n $out ]]; then
    out="# Added by pileprep's scripts/build_tsan_tbb.sh: Debian's source packages (apt-get source onetbb).
$out"
    if [[ ! -f $list || $(<"$list") != "$(printf '%s' "$out")" ]]; then
      printf '%s\n' "$out" | $SUDO tee "$list" >/dev/null
    fi
    return
  fi
  # One-line format (/etc/apt/sources.list).
  list=/etc/apt/sources.list.d/pileprep-src.list
  out=$(awk -v codename="$codename" '$1 == "deb" && /debian/ && $0 ~ ("[ \t]" codename "(-[a-z]+)?[ \t]") {
          sub(/^deb/, "deb-src"); print }' /etc/apt/sources.list 2>/dev/null || true)
  [[ -n $out ]] || die "no Debian archive for '$codename' found in /etc/apt to take deb-src entries from"
  if [[ ! -f $list || $(<"$list") != "$out" ]]; then
    printf '%s\n' "$out" | $SUDO tee "$list" >/dev/null
  fi
}

# sudo's env_reset drops DEBIAN_FRONTEND and the proxy variables apt-get may need: passed through env.
apt_env=(env DEBIAN_FRONTEND=noninteractive)
for v in http_proxy https_proxy HTTP_PROXY HTTPS_PROXY no_proxy NO_PROXY; do
  if [[ -n ${!v:-} ]]; then apt_env+=("$v=${!v}"); fi
done
echo "build_tsan_tbb: building libtbb ($srcpkg $version) with -fsanitize=thread into $prefix (once)" >&2
if ! has_source; then
  add_deb_src
  step "apt-get update" $SUDO "${apt_env[@]}" apt-get update -qq
  has_source || die "apt has no source package $srcpkg $version (the installed libtbb-dev); an archive newer than the installed package? Upgrade libtbb-dev, or set TSAN_TBB_DIR"
fi
if ! command -v dpkg-source >/dev/null; then
  step "installing dpkg-dev" $SUDO "${apt_env[@]}" apt-get install -y -qq --no-install-recommends dpkg-dev
fi

# Download as root into a directory _apt cannot enter: apt falls back to an unsandboxed download
# and says so; that is expected, so the sandbox user is root to begin with.
sandbox=()
if [[ $(id -u) -eq 0 ]]; then sandbox=(-o APT::Sandbox::User=root); fi
cd "$work"
step "downloading Debian's source package" \
  apt-get source -qq --download-only "${sandbox[@]}" "$srcpkg=$version"
dsc=("$work/${srcpkg}_"*.dsc)
[[ -f ${dsc[0]} ]] || die "apt-get source left no .dsc in $work"
# Unpacks the upstream tarball and applies Debian's patches (debian/patches/series).
step "unpacking ${dsc[0]##*/}" dpkg-source -x "${dsc[0]}" "$work/src"

rm -rf "$prefix"
step "configuring oneTBB" cmake -S "$work/src" -B "$work/build" -G Ninja \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DTBB_SANITIZE=thread \
  -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF -DTBB_STRICT=OFF -DTBB4PY_BUILD=OFF \
  -DTBBMALLOC_BUILD=OFF -DTBBMALLOC_PROXY_BUILD=OFF -DTBB_DISABLE_HWLOC_AUTOMATIC_SEARCH=ON \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib
step "building oneTBB" cmake --build "$work/build" -j "${TSAN_TBB_JOBS:-$(nproc)}"
step "installing oneTBB" cmake --install "$work/build"
[[ -f $config_dir/TBBConfig.cmake ]] || die "the install has no $config_dir/TBBConfig.cmake"
# The instrumented library must really be instrumented (a silently dropped -fsanitize=thread
# would bring back the false reports this exists to remove).
[[ $(nm -D "$prefix"/lib/libtbb.so.12 2>/dev/null) == *__tsan_* ]] ||
  die "$prefix/lib/libtbb.so is not built with -fsanitize=thread"
printf '%s\n' "$stamp" >"$stamp_file"
echo "$config_dir"
