#!/usr/bin/env bash
# The main job: installs what tpusim needs, builds it, and trains an MLP (784-512-256-10) on
# Fashion-MNIST on a simulated TPU v3 host (4 chips x 2 cores = 8 replicas) with
# iterations_per_loop 100, then evaluates it on the 10000 test images. The same model is
# trained in fp32 on the host as the reference, and both accuracies are printed.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/install-deps.sh
if [ ! -f build-release/build.ninja ]; then
  meson setup build-release --buildtype=release >build-release.setup.log 2>&1 || {
    cat build-release.setup.log; exit 1; }
fi
ninja -C build-release >build-release.build.log 2>&1 || { tail -50 build-release.build.log; exit 1; }

model_dir=$(mktemp -d /tmp/tpusim-fashion-mnist.XXXXXX)
echo "tpusim: training on the simulated chip; checkpoints and metrics.jsonl in $model_dir"
build-release/cli/tpusim train --chip tpu-v3 --layers 512,256 --optimizer adam \
  --learning-rate 0.001 --train-batch-size 512 --epochs 15 --iterations-per-loop 100 \
  --model-dir "$model_dir" --reference --verbose 1
