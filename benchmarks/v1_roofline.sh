#!/usr/bin/env bash
# Runs the tpu-v1 roofline sweep (bench_v1) and plots it next to the roofline.
#   bash benchmarks/v1_roofline.sh BUILD_DIR      writes benchmarks/v1_roofline.{tsv,png}
set -euo pipefail
build=${1:-build-release}
here=$(cd "$(dirname "$0")" && pwd)
"$build/benchmarks/bench_v1" "$here/v1_roofline.tsv"
gnuplot <<GP
set terminal png size 900,560
set output "$here/v1_roofline.png"
set title "tpu-v1 (simulated): 8 dense 256x256 int8 layers, weights streamed at 34 GB/s"
set xlabel "batch = MACs per weight byte"
set ylabel "TOPS"
set logscale xy 2
set key left top
set grid
roof(x) = (x * 34e9 * 2e-12 < 91.75) ? x * 34e9 * 2e-12 : 91.75
set samples 400
set xrange [8:8192]
set arrow from 1349,0.5 to 1349,128 nohead dt 2
set label "ridge 1349" at 1400,1
plot roof(x) with lines lw 2 title "roofline (34 GB/s, 91.8 TOPS peak)", \
     "$here/v1_roofline.tsv" using 2:3 with linespoints lw 2 pt 7 title "simulated"
GP
echo "wrote $here/v1_roofline.tsv and $here/v1_roofline.png"
