#!/usr/bin/env bash
# Installs the Debian 12 packages tpusim builds, tests and runs with. Needs root (or sudo).
# Packages already present are left alone, so a second run is quick.
set -euo pipefail

packages=(
  build-essential pkg-config python3 meson ninja-build
  libjansson-dev zlib1g-dev libcmocka-dev
  verilator libsystemc-dev
  libopenblas-dev
  libopenmpi-dev openmpi-bin
  clang libclang-rt-14-dev
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "tpusim: installing ${missing[*]} needs root; run this as root or install sudo" >&2
    exit 1
  fi
fi
echo "tpusim: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
