#!/usr/bin/env bash
# The main job: installs what tpusim needs, builds it, and runs a GEMM on a simulated TPU v4
# (values computed, cycles reported), the same GEMM on SCALE-Sim's serial model, and a small
# MLP's layer table. (It becomes Fashion-MNIST training when the host runtime lands.)
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/install-deps.sh
if [ ! -f build-release/build.ninja ]; then
  meson setup build-release --buildtype=release >build-release.setup.log 2>&1 || {
    cat build-release.setup.log; exit 1; }
fi
ninja -C build-release >build-release.build.log 2>&1 || { tail -50 build-release.build.log; exit 1; }
tpusim=build-release/host/tpusim

echo "== one GEMM on a simulated TPU v4 =="
"$tpusim" gemm -m 1024 -k 1024 -n 1024 --chip tpu-v4
echo
echo "== the same GEMM on one 128x128 array, SCALE-Sim v2's serial-fold model (ws) =="
"$tpusim" gemm -m 1024 -k 1024 -n 1024 --chip tpu-v4 --schedule serial --timing-only
echo
echo "== an MLP's layers (batch 1024, 784-1024-1024-10) on TPU v3, timing only =="
layers=$(mktemp --suffix=.csv)
trap 'rm -f "$layers"' EXIT
printf 'Layer, M, N, K,\nfc1, 1024, 1024, 784,\nfc2, 1024, 1024, 1024,\nfc3, 1024, 10, 1024,\n' >"$layers"
"$tpusim" gemm --topology "$layers" --chip tpu-v3
