#!/bin/sh
# scripts/checksrc.sh - house rules a compiler does not check (STYLE.md, "For
# Elastic GPU" 14): no sprintf/strcpy/strcat/strtok/atoi/gets, no // comments
# (they tend to hold commented-out code), no typedef'd structs, the layers,
# and the names (1: egpu_ or egpu__ on whatever is not static). The one
# exception to the typedef rule is include/egpu/cuda_abi.h: it restates the
# CUDA driver API's own types (CUcontext, CUDA_ARRAY_DESCRIPTOR, ...), whose
# names are the ABI.
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
# Names (STYLE.md, "For Elastic GPU" 1): what a file of src/ or a public
# header gives the rest of the program is named egpu_<module>_... (public,
# declared in include/egpu/) or egpu__<module>_... (internal, declared in a
# private *_int.h); anything else is static. scripts/checksrc_names.awk
# lists every non-static function and file-scope variable (defined or
# declared) and every struct, union, enum or typedef declared in a header.
# The exemptions are the names that are not ours to choose, each exactly:
#   - include/egpu/cuda_abi.h, the whole file: it restates the CUDA driver
#     API (cu* functions, CU* types), whose names are the ABI;
#   - in src/vcuda/, a function exported by libegpu-vcuda.so: the global
#     names of src/vcuda/exports.map.in (dlsym) and the EGPU_VCUDA_HOOKS list
#     of src/vcuda/hook_table.h it includes (cu*, nvml*): the interposer
#     stands in for libcuda's and libnvidia-ml's own symbols, so it must
#     define them under their names (src/vcuda/nvml_abi.h declares two);
#   - in src/agent/nvml_int.h, the nvml* names: NVML's functions and
#     struct tags as nvml.h spells them, which the agent looks up by name
#     and tests/mock/nvml_mock.c defines;
#   - main, in a .c file;
#   - environ, POSIX's variable, declared by hand where unistd.h does not.
name_files=$(echo "$files" | grep -E '^(src/|include/egpu/)' | grep -vx 'include/egpu/cuda_abi.h')
vcuda_exports=$({
    sed -n 's/^[[:space:]]*X([A-Z]*,[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\)).*/\1/p' src/vcuda/hook_table.h
    sed -n '/global:/,/local:/s/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\);.*/\1/p' src/vcuda/exports.map.in
} 2>/dev/null | tr '\n' ' ')
# shellcheck disable=SC2086
bad_names=$(awk -f scripts/checksrc_names.awk $name_files | awk -v exports=" $vcuda_exports " '
    {
        file = $1
        sub(/:[0-9]+:$/, "", file)
        kind = $2
        name = $3
    }
    name ~ /^egpu_/ { next }
    kind == "function" && name == "main" && file ~ /\.c$/ { next }
    kind == "function" && file ~ /^src\/vcuda\// && index(exports, " " name " ") { next }
    file == "src/agent/nvml_int.h" && name ~ /^nvml/ { next }
    kind == "variable" && name == "environ" { next }
    { print $1 " " kind " " name ": seen outside its file, so named egpu_<module>_... or egpu__<module>_..." }')
if [ -n "$bad_names" ]; then
    echo "$bad_names"
    echo "checksrc: name above outside the house's dialect (STYLE.md 1: public egpu_<module>_<verb> in include/egpu/*.h, internal egpu__<module>_... in a private *_int.h, static unprefixed; a header's types too)" >&2
    status=1
fi
[ $status -eq 0 ] && echo "checksrc: $(echo "$files" | wc -w) files ok"
exit $status
