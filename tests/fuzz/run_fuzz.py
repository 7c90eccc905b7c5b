#!/usr/bin/env python3
"""Runs one libFuzzer target for a bounded time and prints one line of figures.

The target starts from its seed corpus (tests/fuzz/seeds/<name>) and its regression inputs
(tests/fuzz/regress/<name>, crashes found earlier); libFuzzer runs every one of those first,
so a regression fails at once. New inputs go to a fresh working corpus in the build
directory, never into the source tree; a crash, leak, timeout or out-of-memory writes its
input to <work>/artifacts/ and fails the run. The last line is

    fuzz <name>: <N> executions in <S> s (<R>/s), <C> crashes, corpus <a> -> <b> inputs

and the exit status is 0 only if the run completed without a finding.

usage: run_fuzz.py TARGET_EXE --name NAME --seeds DIR [--regress DIR] --work DIR
                   --seconds S --max-len BYTES [--quiet-target]
TPUSIM_FUZZ_SECONDS in the environment overrides --seconds (for a longer run by hand).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time


def count_files(d):
    return len(os.listdir(d)) if d and os.path.isdir(d) else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('exe')
    ap.add_argument('--name', required=True)
    ap.add_argument('--seeds', required=True)
    ap.add_argument('--regress')
    ap.add_argument('--work', required=True)
    ap.add_argument('--seconds', type=int, required=True)
    ap.add_argument('--max-len', type=int, required=True)
    ap.add_argument('--quiet-target', action='store_true',
                    help="close the target's stdout and stderr (libFuzzer's and the "
                    "sanitizers' reports still show)")
    a = ap.parse_args()
    seconds = int(os.environ.get('TPUSIM_FUZZ_SECONDS', a.seconds))

    corpus = os.path.join(a.work, 'corpus')
    artifacts = os.path.join(a.work, 'artifacts')
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(corpus)
    os.makedirs(artifacts)
    tmp = os.path.join(a.work, 'tmp') # the target's scratch files
    os.makedirs(tmp)

    env = dict(os.environ)
    env['TMPDIR'] = tmp
    env.setdefault('ASAN_OPTIONS', 'detect_leaks=1:detect_stack_use_after_return=1')
    env.setdefault('UBSAN_OPTIONS', 'halt_on_error=1:print_stacktrace=1')
    dirs = [corpus, a.seeds] + ([a.regress] if count_files(a.regress) else [])
    cmd = [a.exe, '-max_total_time=%d' % seconds, '-max_len=%d' % a.max_len,
           '-timeout=20', '-rss_limit_mb=2048', '-malloc_limit_mb=1024',
           '-print_final_stats=1', '-artifact_prefix=' + artifacts + '/']
    if a.quiet_target:
        cmd.append('-close_fd_mask=3')
    cmd += dirs
    print('$ ' + ' '.join(cmd), flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, errors='replace')
    elapsed = time.monotonic() - start
    out = proc.stdout

    findings = sorted(os.listdir(artifacts))
    failed = proc.returncode != 0 or findings
    # the whole log when something was found; otherwise its head and tail
    lines = out.splitlines()
    if failed or len(lines) <= 40:
        print(out, end='')
    else:
        print('\n'.join(lines[:12] + ['... (%d lines)' % (len(lines) - 32)] + lines[-20:]))

    m = re.search(r'stat::number_of_executed_units: (\d+)', out)
    execs = int(m.group(1)) if m else 0
    seeds = count_files(a.seeds) + count_files(a.regress)
    print('fuzz %s: %d executions in %.0f s (%.0f/s), %d crash%s, corpus %d -> %d inputs'
          % (a.name, execs, elapsed, execs / elapsed if elapsed > 0 else 0, len(findings),
             '' if len(findings) == 1 else 'es', seeds, seeds + count_files(corpus)))
    for f in findings:
        print('  finding: %s (reproduce: %s %s)' % (f, a.exe, os.path.join(artifacts, f)))
    if failed and not findings:
        print('  the target exited with status %d and left no input' % proc.returncode)
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
