#!/usr/bin/env bash
# Packaging check (issue 18), on an existing build directory (default build/, built by
# `.ci/kiln.sh test`): installs kiln into a fresh temporary prefix, then builds and runs
# examples/consumer (a small training program) against it the ways a user would:
#   1. CMake: find_package(kiln) with CMAKE_PREFIX_PATH pointing only at that prefix;
#   2. pkg-config: g++ -std=c++20 main.cpp $(pkg-config --cflags --libs kiln);
#   3. the Debian package: cpack writes libkiln-dev_*.deb, whose contents and Depends are checked,
#      whose installation apt simulates (apt-get -s: every Depends resolvable, nothing changed), and
#      whose files, unpacked into a scratch root, build and run the consumer through find_package
#      (installing it for real needs root: see the README, "Using kiln in your project").
# Nothing of the source or build tree may appear on the consumer's include or library paths.
#   .ci/consumer.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=$(realpath "${1:-build}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cp -r examples/consumer "$tmp/src" # built from outside the tree, so that any path into it is a leak

timed() { # timed LABEL COMMAND...: runs it, prints its wall time
  local label=$1 t0
  shift
  t0=$(date +%s%N)
  "$@"
  local ms=$((($(date +%s%N) - t0) / 1000000))
  printf 'consumer: %s: %d.%01d s\n' "$label" $((ms / 1000)) $((ms % 1000 / 100)) >&2
}
no_tree_paths() { # no_tree_paths FILE: fails if FILE names the source or build tree
  if grep -q -e "$src" -e "$build" "$1"; then
    echo "consumer: $1 refers to kiln's source or build tree:" >&2
    grep -o -e "[^ \"]*$src[^ \"]*" -e "[^ \"]*$build[^ \"]*" "$1" | sort -u >&2
    exit 1
  fi
}

timed "install" cmake --install "$build" --prefix "$prefix" >/dev/null
echo "consumer: installed:"
(cd "$prefix" && find . -type f -o -type l | sort | sed 's/^/  /')
if find "$prefix/include" -type f ! -path "$prefix/include/kiln/*.h" | grep .; then
  echo "consumer: the install has files other than the public headers under include/" >&2
  exit 1
fi

# 1. CMake, C++ only, with only the prefix to search (no package registry either).
timed "cmake configure" cmake -S "$tmp/src" -B "$tmp/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
grep -q "^kiln_DIR:PATH=$prefix/" "$tmp/cmake/CMakeCache.txt" || {
  echo "consumer: find_package(kiln) did not find the package in $prefix" >&2
  grep '^kiln_DIR' "$tmp/cmake/CMakeCache.txt" >&2
  exit 1
}
timed "cmake build" cmake --build "$tmp/cmake" >/dev/null
no_tree_paths "$tmp/cmake/compile_commands.json"
no_tree_paths "$tmp/cmake/build.ninja"
timed "cmake run" "$tmp/cmake/consumer"
# ldd's output is taken whole before grep looks at it: with pipefail, `ldd | grep -q` fails
# whenever grep stops at the match before ldd has written its last line (SIGPIPE).
libs=$(ldd "$tmp/cmake/consumer")
[ ! -e "$prefix/lib/libkiln.so" ] || grep -q "libkiln.so.* => $prefix/" <<<"$libs" || {
  echo "consumer: the CMake build does not run with $prefix's libkiln:" >&2
  echo "$libs" >&2
  exit 1
}

# 2. pkg-config, with the prefix's kiln.pc only.
export PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name kiln.pc)")
flags=$(pkg-config --cflags --libs kiln)
echo "consumer: pkg-config --cflags --libs kiln: $flags"
case "$flags" in *"$src"* | *"$build"*) echo "consumer: kiln.pc refers to the source or build tree" >&2; exit 1 ;; esac
# shellcheck disable=SC2086 # the flags are words
timed "pkg-config build" g++ -std=c++20 -O2 "$tmp/src/main.cpp" $flags -o "$tmp/consumer-pc"
timed "pkg-config run" env LD_LIBRARY_PATH="$(pkg-config --variable=libdir kiln)" "$tmp/consumer-pc"

# 3. The Debian package (cpack installs into its own staging directory under /usr).
timed "cpack" cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/deb" >/dev/null
deb=$(ls "$tmp"/deb/libkiln-dev_*.deb)
dpkg-deb -c "$deb" | awk '{print $6}' >"$tmp/deb-files"
for f in ./usr/include/kiln/kiln.h ./usr/include/kiln/version.h ./usr/lib/cmake/kiln/kilnConfig.cmake \
  ./usr/lib/cmake/kiln/kilnConfigVersion.cmake ./usr/lib/pkgconfig/kiln.pc; do
  grep -qx "$f" "$tmp/deb-files" || { echo "consumer: $(basename "$deb") lacks $f" >&2; exit 1; }
done
grep -q '^./usr/lib/libkiln\.' "$tmp/deb-files" || { echo "consumer: $(basename "$deb") lacks libkiln" >&2; exit 1; }
depends=$(dpkg-deb -f "$deb" Depends)
echo "consumer: $(basename "$deb"): $(wc -l <"$tmp/deb-files") entries, Depends: $depends"
dpkg-deb -x "$deb" "$tmp/deb-root"
grep -q "^prefix=/usr$" "$tmp/deb-root/usr/lib/pkgconfig/kiln.pc" || { echo "consumer: the package's kiln.pc is not for /usr" >&2; exit 1; }
timed "apt-get -s install" sh -c 'apt-get -s -qq install "$1" >"$2" 2>&1' sh "$deb" "$tmp/apt-sim" || {
  echo "consumer: apt would not install $(basename "$deb"):" >&2
  cat "$tmp/apt-sim" >&2
  exit 1
}
# The package's CMake files are relocatable: its /usr, unpacked elsewhere, serves find_package.
timed "deb cmake configure" cmake -S "$tmp/src" -B "$tmp/deb-cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/deb-root/usr" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >/dev/null
grep -q "^kiln_DIR:PATH=$tmp/deb-root/usr/" "$tmp/deb-cmake/CMakeCache.txt" || {
  echo "consumer: find_package(kiln) did not find the unpacked package" >&2
  exit 1
}
timed "deb cmake build" cmake --build "$tmp/deb-cmake" >/dev/null
timed "deb run" env LD_LIBRARY_PATH="$tmp/deb-root/usr/lib" "$tmp/deb-cmake/consumer"
echo "consumer: ok"
