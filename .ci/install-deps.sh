#!/usr/bin/env bash
# Installs the Debian 12 packages kiln needs, only those that are missing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache lld-19 clang-19 libclang-rt-19-dev
  llvm-19-dev zlib1g-dev libzstd-dev libedit-dev libxml2-dev libffi-dev
  libtbb-dev librange-v3-dev libgtest-dev libgmock-dev libbenchmark-dev libeigen3-dev
  nlohmann-json3-dev graphviz libopenmpi-dev openmpi-bin
  dataset-fashion-mnist fortunes pkg-config file
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "kiln: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
