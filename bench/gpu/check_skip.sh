#!/bin/sh
# bench/gpu/check_skip.sh PROGRAM - the skip path of a bench/gpu program, run by ctest on
# every machine: with the driver library pointed at a file that does not exist, the program
# must print exactly one line "no NVIDIA GPU: <reason>; skipping" and exit 0.
set -u
out=$(EGPU_GPUBENCH_LIBCUDA=/nonexistent/libcuda.so.1 "$1" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "check_skip: exit status $rc, want 0" >&2; exit 1; }
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "check_skip: want one line" >&2; exit 1; }
case "$out" in
"no NVIDIA GPU: dlopen /nonexistent/libcuda.so.1: "*"; skipping") exit 0 ;;
*) echo "check_skip: unexpected line" >&2; exit 1 ;;
esac
