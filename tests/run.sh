#!/usr/bin/env bash
# Installs what tpusim needs, builds it with every optional part (the Verilated RTL array,
# -Drtl=enabled; the SystemC/TLM-2.0 model and its device backend, -Dsystemc=enabled; the
# hosts of a pod slice as MPI ranks, -Dmpi=enabled, whose tests run mpirun on localhost), and
# runs the whole test suite three ways: a plain optimised build; AddressSanitizer +
# UndefinedBehaviorSanitizer (which fail the test on the first report; ASan also catches
# uses of returned stack frames); and ThreadSanitizer on the threaded parts (the chip's
# scheduler and queues, the runtime's threads, the SystemC backend's feed calls). Then it fuzzes every parser of user input for a short bounded time
# (tests/fuzz: a clang build with libFuzzer, each target one case; a crash fails it). Ends
# with "N passed, N failed" and exits non-zero if anything failed.
#
#   bash tests/run.sh            everything
#   bash tests/run.sh --quick    the plain build only
set -uo pipefail
cd "$(dirname "$0")/.."

quick=0
[ "${1:-}" = "--quick" ] && quick=1

bash tests/install-deps.sh || { echo "0 passed, 1 failed (installing the packages failed)"; exit 1; }

jobs=$(nproc 2>/dev/null || echo 2)

# run_suite LABEL DIR "MESON OPTIONS" [MESON TEST ARGUMENTS...]
# (CC in the environment chooses the compiler when DIR is first configured.)
run_suite() {
  local label=$1 dir=$2 opts=$3
  shift 3
  if [ ! -f "$dir/build.ninja" ]; then
    # shellcheck disable=SC2086
    meson setup "$dir" $opts >"$dir.setup.log" 2>&1 || {
      cat "$dir.setup.log"; echo "$label: meson setup failed"; return 1; }
  else
    # a directory left from an earlier run keeps its options unless they are set again
    # shellcheck disable=SC2086
    meson configure "$dir" $opts >"$dir.setup.log" 2>&1 || {
      cat "$dir.setup.log"; echo "$label: meson configure failed (remove $dir)"; return 1; }
  fi
  rm -f "$dir/meson-logs/testlog.json" # a failed build must not count an old run
  ninja -C "$dir" >"$dir.build.log" 2>&1 || {
    tail -50 "$dir.build.log"; echo "$label: build failed"; return 1; }
  meson test -C "$dir" --print-errorlogs --num-processes "$jobs" "$@" || true
}

labels=()
run_suite plain build-tests "-Drtl=enabled -Dsystemc=enabled -Dmpi=enabled --buildtype=debugoptimized"
labels+=("plain=build-tests")
if [ $quick -eq 0 ]; then
  # sanitizers slow the heavy tests (gemm, training) two to three times: longer timeouts
  run_suite asan+ubsan build-asan "-Drtl=enabled -Dsystemc=enabled -Dmpi=enabled --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false" --timeout-multiplier 3
  labels+=("asan+ubsan=build-asan")
  # TSan: the threaded parts only (the MPI tests stay out: Open MPI's own threads and
  # shared-memory transport are not built for ThreadSanitizer, whose reports there are
  # Open MPI's, not tpusim's; the pod's threads are checked by the in-process pod tests)
  run_suite tsan build-tsan "-Drtl=enabled -Dsystemc=enabled -Dmpi=enabled --buildtype=debugoptimized -Db_sanitize=thread" chip runtime runtime_shard runtime_pod runtime_keras equivalence models net net_chip net_partition op_stats ops_train conv partition_ops partition_rules keras systemc_backend replica_share pod_device
  labels+=("tsan=build-tsan")
  # libFuzzer needs clang; the fuzz build instruments the C code only (no RTL). Each target
  # fuzzes for 15 s (tests/fuzz/meson.build), two at a time.
  CC=clang run_suite fuzz build-fuzz "-Drtl=disabled -Dsystemc=disabled -Dmpi=disabled -Dfuzz=enabled --buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false" --suite fuzz
  labels+=("fuzz=build-fuzz")
fi
python3 tests/summarize.py "${labels[@]}"
