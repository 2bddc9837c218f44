#!/bin/sh
# tests/lint/checksrc_names.sh - the naming rule of scripts/checksrc.sh
# (STYLE.md, "For Elastic GPU" 1) refuses what it must and nothing else.
#
# sh checksrc_names.sh SOURCE_DIR: copies checksrc.sh, checksrc_names.awk and
# the interposer's export list (src/vcuda/hook_table.h, exports.map.in) into
# a scratch tree outside git, checks that a tree of well-named files passes,
# then adds one file at a time that must make it fail with FILE:LINE and the
# name, and one the exemptions must let through. Exits 0, or 1 after a line
# naming the case that went wrong.
set -u
src=${1:?usage: checksrc_names.sh SOURCE_DIR}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/checksrc_names.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/src/demo" "$tmp/src/vcuda" "$tmp/include/egpu"
cp "$src/scripts/checksrc.sh" "$src/scripts/checksrc_names.awk" "$tmp/scripts/" || exit 1
cp "$src/src/vcuda/hook_table.h" "$src/src/vcuda/exports.map.in" "$tmp/src/vcuda/" || exit 1
failed=0

# The well-named tree: public and internal names, static and file-local ones
# unprefixed, main, an exported CUDA entry point of the interposer.
cat >"$tmp/include/egpu/demo.h" <<'C'
/* egpu/demo.h - a public header. */
struct egpu_demo_config {
    int n;
};
enum egpu_demo_kind { EGPU_DEMO_A };
typedef int (*egpu_demo_cb)(void *ud);
int egpu_demo_run(const struct egpu_demo_config *cfg);
extern const int egpu_demo_limit;
C
cat >"$tmp/src/demo/demo_int.h" <<'C'
/* demo/demo_int.h - a private header. */
struct egpu__demo_state {
    int (*step)(int x);
};
int egpu__demo_step(int x);
static inline int twice(int x)
{
    return 2 * x;
}
C
cat >"$tmp/src/demo/run.c" <<'C'
/* demo/run.c - a component's file. */
#include "demo_int.h"
struct local {
    int n;
};
static int helper(struct local *l);
static const char *names[] = {"a", "b"};
static struct {
    int x;
} table[] = {{1}};
const int egpu_demo_limit = 3;
int egpu__demo_count;
int egpu__demo_step(int x)
{
    struct local l = {x};
    return helper(&l) + table[0].x + (names[0][0] == 'a');
}
int egpu_demo_run(const struct egpu_demo_config *cfg)
{
    return egpu__demo_step(cfg->n);
}
static int helper(struct local *l)
{
    return twice(l->n);
}
int main(void)
{
    return 0;
}
C
cat >"$tmp/src/vcuda/hooks.c" <<'C'
/* vcuda/hooks.c - an exported entry point keeps the driver's name. */
extern char **environ;
int cuInit(unsigned int flags)
{
    return (int)flags;
}
C

out=$(sh "$tmp/scripts/checksrc.sh" 2>&1)
if [ $? -ne 0 ]; then
    echo "FAIL: the well-named tree is refused:" >&2
    echo "$out" >&2
    exit 1
fi
echo "ok: the well-named tree passes ($out)"

# must_fail FILE LINE NAME: FILE (written from stdin) makes checksrc.sh fail
# with FILE:LINE: ... NAME and the rule; FILE is removed afterwards.
must_fail()
{
    cat >"$tmp/$1"
    out=$(sh "$tmp/scripts/checksrc.sh" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "FAIL: $1: checksrc.sh passed a bad $3" >&2
        failed=1
    elif ! echo "$out" | grep -q "^$1:$2: .* $3: " ||
        ! echo "$out" | grep -q "STYLE.md 1"; then
        echo "FAIL: $1: checksrc.sh failed without naming $1:$2 and $3 and the rule:" >&2
        echo "$out" >&2
        failed=1
    else
        echo "ok: $1:$2 $3 refused"
    fi
    rm -f "$tmp/$1"
}

must_fail src/demo/bad.c 3 demo_bad <<'C'
/* demo/bad.c - a function without the prefix. */
#include "demo_int.h"
int demo_bad(void)
{
    return 0;
}
C
must_fail src/demo/bad.c 2 demo_count <<'C'
/* demo/bad.c - a variable without the prefix. */
unsigned long demo_count = 0;
C
must_fail src/demo/bad.c 2 demo_hook <<'C'
/* demo/bad.c - a pointer to a function without the prefix. */
void (*demo_hook)(int sig);
C
must_fail src/demo/bad_int.h 3 demo_decl <<'C'
/* demo/bad_int.h - a declaration without the prefix. */
int egpu__demo_ok(void);
int demo_decl(const char *s,
              int n);
C
must_fail src/demo/bad_int.h 2 demo_thing <<'C'
/* demo/bad_int.h - a struct without the prefix. */
struct demo_thing {
    int n;
};
C
must_fail include/egpu/bad.h 4 demo_kind <<'C'
/* egpu/bad.h - an enum without the prefix. */
#ifdef __cplusplus
extern "C" {
enum demo_kind { DEMO_A };
}
#endif
C
must_fail src/demo/bad.h 2 demo_cb <<'C'
/* demo/bad.h - a typedef without the prefix. */
typedef int (*demo_cb)(void *ud);
C
# egpu without an underscore is not the prefix
must_fail src/demo/bad.c 2 egpudemo_run <<'C'
/* demo/bad.c - egpu glued to the name. */
int egpudemo_run(void);
C
# the interposer's exemption is its export list, and only in src/vcuda
must_fail src/demo/bad.c 2 cuInit <<'C'
/* demo/bad.c - a CUDA name outside the interposer. */
int cuInit(unsigned int flags);
C
must_fail src/vcuda/bad.c 2 cuNotHooked <<'C'
/* vcuda/bad.c - a CUDA name the interposer does not export. */
int cuNotHooked(void);
C

[ $failed -eq 0 ] && echo "checksrc_names: every case as expected"
exit $failed
