#!/bin/sh
# scripts/format.sh - format C sources with the repository's .clang-format.
#   scripts/format.sh          rewrite files in place
#   scripts/format.sh --check  fail, listing the files, if any is not formatted
set -u
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
    echo "format: clang-format not installed (apt-get install clang-format)" >&2
    exit 1
fi
files=$(git ls-files --cached --others --exclude-standard 'src/*.[ch]' 'include/*.h' 'tests/*.[ch]' 'bench/*.[ch]' 2>/dev/null)
[ -n "$files" ] || files=$(find src include tests bench -name '*.[ch]' 2>/dev/null)
if [ "${1:-}" = "--check" ]; then
    bad=""
    for f in $files; do
        clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
    done
    if [ -n "$bad" ]; then
        echo "format: not formatted (run make format):$bad" >&2
        exit 1
    fi
    echo "format: $(echo "$files" | wc -w) files ok"
    exit 0
fi
# shellcheck disable=SC2086
clang-format -i $files
