#!/bin/sh
# scripts/checksrc.sh - house rules a compiler does not check (STYLE.md, "For
# Elastic GPU" 14): no sprintf/strcpy/strcat/strtok/atoi/gets, no // comments
# (they tend to hold commented-out code), no typedef'd structs. The one
# exception is include/egpu/cuda_abi.h: it restates the CUDA driver API's own
# types (CUcontext, CUDA_ARRAY_DESCRIPTOR, ...), whose names are the ABI.
set -u
cd "$(dirname "$0")/.."
files=$(git ls-files --cached --others --exclude-standard 'src/*.[ch]' 'include/*.h' 'tests/*.[ch]' 'bench/*.[ch]' 2>/dev/null)
[ -n "$files" ] || files=$(find src include tests bench -name '*.[ch]' 2>/dev/null)
status=0
# shellcheck disable=SC2086
if grep -nE '(^|[^_a-zA-Z0-9])(sprintf|strcpy|strcat|strtok|atoi|gets)[[:space:]]*\(' $files; then
    echo "checksrc: banned function above (use snprintf, memcpy with a length, strtok_r, strtol)" >&2
    status=1
fi
# shellcheck disable=SC2086
if grep -nE '^[[:space:]]*//|;[[:space:]]*//' $files; then
    echo "checksrc: // comment above (write /* */ sentences; delete dead code)" >&2
    status=1
fi
# shellcheck disable=SC2086
typedef_files=$(echo "$files" | grep -vx 'include/egpu/cuda_abi.h')
# shellcheck disable=SC2086
if grep -nE 'typedef[[:space:]]+struct' $typedef_files; then
    echo "checksrc: typedef'd struct above (write struct name)" >&2
    status=1
fi
# Layers (DESIGN.md section 4): src/core and src/api serve every component
# and do no I/O, src/kube and src/net hold the shared I/O, and no component
# includes another component's header: what two components share lives in
# src/api (or below), never in one of them.
for f in $(echo "$files" | grep '^src/'); do
    dir=$(echo "$f" | cut -d/ -f2)
    case $dir in
    core) allowed="core" ;;
    api) allowed="core api" ;;
    kube | net) allowed="core api kube net log cli grpc" ;;
    *) allowed="core api kube net log cli grpc cuda_abi $dir" ;;
    esac
    for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"egpu\/\([a-z_]*\)\.h".*/\1/p' "$f"); do
        case " $allowed " in
        *" $h "*) ;;
        *)
            echo "$f: includes egpu/$h.h" >&2
            echo "checksrc: src/$dir may include only egpu/{$(echo "$allowed" | tr ' ' ',')}.h (a component never includes another's header; shared names go in src/api)" >&2
            status=1
            ;;
        esac
    done
    if grep -nE '#[[:space:]]*include[[:space:]]*"\.\./' "$f"; then
        echo "checksrc: relative include of another folder above (include egpu/<layer>.h)" >&2
        status=1
    fi
done
[ $status -eq 0 ] && echo "checksrc: $(echo "$files" | wc -w) files ok"
exit $status
