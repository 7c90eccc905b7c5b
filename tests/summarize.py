#!/usr/bin/env python3
"""Sums test results from one or more Meson test logs (meson-logs/testlog.json).

A CMocka program counts each of its test cases (read from its '[  PASSED  ] N test(s).',
'[  FAILED  ] N test(s)' and '[  SKIPPED ] N test(s)' lines); any other test program counts
as one. Prints one line per
build and, last, the total as 'N passed, N failed'. Exits 1 if anything failed or no test ran.

usage: summarize.py LABEL=BUILD_DIR [LABEL=BUILD_DIR ...]
"""
import json
import os
import re
import sys

PASSED = re.compile(r'^\[  PASSED  \] (\d+) test\(s\)\.', re.M)
FAILED = re.compile(r'^\[  FAILED  \] (\d+) test\(s\), listed below', re.M)
SKIPPED = re.compile(r'^\[  SKIPPED \] (\d+) test\(s\), listed below', re.M)
CASES = re.compile(r'^\[==========\] (\d+) test\(s\) run\.', re.M)


def count(entry):
    out = (entry.get('stdout') or '') + (entry.get('stderr') or '')
    # EXPECTEDFAIL: a should_fail test that failed as it must (the sanitizer canaries)
    ok = entry.get('result') in ('OK', 'EXPECTEDFAIL')
    run = CASES.findall(out)
    if run:
        passed = sum(int(x) for x in PASSED.findall(out))
        failed = sum(int(x) for x in FAILED.findall(out))
        skipped = sum(int(x) for x in SKIPPED.findall(out))
        # a crash after some cases leaves the run count unmatched: count the rest as failed
        missing = sum(int(x) for x in run) - passed - failed - skipped
        failed += max(missing, 0)
        if not ok and failed == 0:
            failed = 1
        return passed, failed, skipped
    return (1, 0, 0) if ok else (0, 1, 0)


def main():
    total_p = total_f = total_s = 0
    for arg in sys.argv[1:]:
        label, _, build = arg.partition('=')
        path = os.path.join(build, 'meson-logs', 'testlog.json')
        p = f = sk = 0
        failed_names = []
        try:
            with open(path, encoding='utf-8') as fh:
                for line in fh:
                    entry = json.loads(line)
                    if entry.get('result') == 'SKIP':
                        sk += 1
                        continue
                    a, b, c = count(entry)
                    p += a
                    f += b
                    sk += c
                    if b:
                        failed_names.append(entry.get('name', '?'))
        except FileNotFoundError:
            print(f'{label}: no test log at {path}: the suite did not run')
            f += 1
        suffix = f' (failed: {", ".join(failed_names)})' if failed_names else ''
        print(f'{label}: {p} passed, {f} failed, {sk} skipped{suffix}')
        total_p += p
        total_f += f
        total_s += sk
    print(f'{total_p} passed, {total_f} failed, {total_s} skipped')
    return 1 if total_f or not total_p else 0


if __name__ == '__main__':
    sys.exit(main())
