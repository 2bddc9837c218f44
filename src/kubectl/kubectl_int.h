/* kubectl/kubectl_int.h - what kubectl-egpu's files share: the table
 * layout (table.c), the terminal-safe text (text.c) and DRA mode's cards
 * (dra.c). Private to src/kubectl. */
#ifndef EGPU_KUBECTL_INT_H
#define EGPU_KUBECTL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/core.h"
#include "egpu/kubectl.h"

#define EGPU_KUBECTL_PROG     "kubectl-egpu"
#define EGPU_KUBECTL_COLS_MAX 16
#define EGPU_KUBECTL_PADDING  3 /* spaces between columns, as kubectl's tabwriter */

/* A table of text cells, nrows x ncols, filled row by row. */
struct egpu__kubectl_table {
    size_t ncols, nrows, cap;
    char **cells; /* owned; NULL cells print as "" */
    int err; /* the first failure of egpu__kubectl_table_row or egpu__kubectl_table_set, 0 = none */
};

void egpu__kubectl_table_init(struct egpu__kubectl_table *t, size_t ncols);
void egpu__kubectl_table_free(struct egpu__kubectl_table *t);
/* Start t with the heading row of the columns 0..n of head (n <=
 * EGPU_KUBECTL_COLS_MAX) whose bit is not set in hide; col[c] gets column c's
 * place in t, SIZE_MAX when hidden. */
void egpu__kubectl_table_start(struct egpu__kubectl_table *t, const char *const *head, int n,
                               unsigned hide, size_t *col);
/* Start a new row of empty cells. A failure (-ENOMEM) is kept in t->err
 * and makes egpu__kubectl_table_print fail; the row is then not added. */
void egpu__kubectl_table_row(struct egpu__kubectl_table *t);
/* Set cell col of the last row to printf text (at most 1023 bytes). A
 * failure (-EINVAL: no row, col out of range; -ENOMEM) is kept in t->err. */
void egpu__kubectl_table_set(struct egpu__kubectl_table *t, size_t col, const char *fmt, ...)
    EGPU_PRINTF(3, 4);
/* Append the table to out, laid out (see table.c). Returns 0, t->err,
 * -EINVAL (more than EGPU_KUBECTL_COLS_MAX columns), -ENOMEM or -EMSGSIZE. */
int egpu__kubectl_table_print(const struct egpu__kubectl_table *t,
                              struct egpu_buf *out) EGPU_MUST_CHECK;

/* Make s (NUL-terminated, edited in place, never longer) safe to print:
 * each C0 or C1 control, DEL, byte outside well-formed UTF-8, Unicode
 * bidirectional control (U+061C, U+200E, U+200F, U+202A..U+202E,
 * U+2066..U+2069) and line or paragraph separator (U+2028, U+2029) becomes
 * one '?'; other text is kept (text.c). Never fails. */
void egpu__kubectl_text_clean(char *s);

/* DRA mode's cards and shares (dra.c), rendered by render.c. */
#define EGPU__KUBECTL_DRA_STR_MAX 65 /* a DRA string attribute or shareID, 64 bytes + NUL */
#define EGPU__KUBECTL_DRA_DEV_MAX 64 /* a device name, a DNS label 63 + NUL */

struct egpu__kubectl_dra_share {
    char ns[EGPU_NAMESPACE_MAX];
    char claim[EGPU_K8S_NAME_MAX];
    char share_id[EGPU__KUBECTL_DRA_STR_MAX]; /* "" = none (a device not shared) */
    int64_t core_pct;                         /* consumed cores, percent 0..100 */
    int64_t mem_mib;                          /* consumed memory, MiB */
    bool whole;                               /* no consumedCapacity: the whole card */
    size_t npods;                             /* status.reservedFor's pods, in its order */
    char **pods;                              /* owned; NULL when none */
};

struct egpu__kubectl_dra_card {
    char node[EGPU_K8S_NAME_MAX]; /* spec.nodeName */
    char pool[EGPU_K8S_NAME_MAX]; /* spec.pool.name */
    int64_t generation;           /* spec.pool.generation */
    char device[EGPU__KUBECTL_DRA_DEV_MAX];
    char uuid[EGPU__KUBECTL_DRA_STR_MAX];  /* "" = not given */
    char model[EGPU__KUBECTL_DRA_STR_MAX]; /* productName; "" = not given */
    int64_t index;                         /* 0..1023; -1 = unknown */
    int64_t core_total;                    /* capacity cores, percent */
    int64_t mem_mib;                       /* capacity memory, MiB */
    bool tainted;                          /* a NoSchedule or NoExecute taint */
    size_t nshares;
    struct egpu__kubectl_dra_share *shares; /* owned, sorted by namespace, claim, shareID */
};

/* A pool seen, with the newest generation of its slices (even one without
 * devices: its node is still in DRA mode, and older slices still count for
 * nothing). */
struct egpu__kubectl_dra_pool {
    char name[EGPU_K8S_NAME_MAX];
    char node[EGPU_K8S_NAME_MAX];
    int64_t generation;
};

struct egpu_kubectl_dra {
    char driver[EGPU_K8S_NAME_MAX];
    bool claims_added; /* no slice after a claim */
    size_t ncards, cap;
    struct egpu__kubectl_dra_card *cards; /* owned */
    size_t npools;
    struct egpu__kubectl_dra_pool *pools; /* owned */
};

/* Whether d (may be NULL) has a slice of node: the node is in DRA mode. */
bool egpu__kubectl_dra_has_node(const struct egpu_kubectl_dra *d, const char *node);

#endif /* EGPU_KUBECTL_INT_H */
