/* kubectl/table.c - the tables kubectl-egpu prints, laid out as kubectl's
 * printers lay theirs out (text/tabwriter, padding 3, no minimum width):
 * every column as wide as its widest cell plus three spaces, the last cell
 * of a row unpadded, trailing blanks trimmed. Control characters (C0, C1,
 * bidirectional) in a cell show as '?' (text.c), so no object's text can add
 * a line, reorder a row or reach the terminal as a sequence.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kubectl_int.h"

void egpu__kubectl_table_start(struct egpu__kubectl_table *t, const char *const *head, int n,
                               unsigned hide, size_t *col)
{
    size_t ncols = 0;

    for (int c = 0; c < n; c++)
        col[c] = (hide >> c) & 1u ? SIZE_MAX : ncols++;
    egpu__kubectl_table_init(t, ncols);
    egpu__kubectl_table_row(t);
    for (int c = 0; c < n; c++) {
        if (col[c] != SIZE_MAX)
            egpu__kubectl_table_set(t, col[c], "%s", head[c]);
    }
}

void egpu__kubectl_table_init(struct egpu__kubectl_table *t, size_t ncols)
{
    memset(t, 0, sizeof(*t));
    t->ncols = ncols;
}

void egpu__kubectl_table_free(struct egpu__kubectl_table *t)
{
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        egpu_free(t->cells[i]);
    egpu_free(t->cells);
    memset(t, 0, sizeof(*t));
}

void egpu__kubectl_table_row(struct egpu__kubectl_table *t)
{
    if (t->err)
        return;
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **cells = egpu_realloc(t->cells, cap * t->ncols * sizeof(*cells));

        if (cells == NULL) {
            t->err = -ENOMEM;
            return;
        }
        t->cells = cells;
        t->cap = cap;
    }
    memset(&t->cells[t->nrows * t->ncols], 0, t->ncols * sizeof(*t->cells));
    t->nrows++;
}

void egpu__kubectl_table_set(struct egpu__kubectl_table *t, size_t col, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    char **cell;

    if (t->err)
        return;
    if (t->nrows == 0 || col >= t->ncols) {
        t->err = -EINVAL;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    /* A control character (a newline, an escape sequence, CSI U+009B, a
     * BiDi override) in an object's text would break the table, drive the
     * terminal or reorder the row: it shows as '?'. */
    egpu__kubectl_text_clean(buf);
    cell = &t->cells[(t->nrows - 1) * t->ncols + col];
    egpu_free(*cell);
    *cell = egpu_strdup(buf);
    if (*cell == NULL)
        t->err = -ENOMEM;
}

int egpu__kubectl_table_print(const struct egpu__kubectl_table *t, struct egpu_buf *out)
{
    size_t width[EGPU_KUBECTL_COLS_MAX] = {0};
    int rc = 0;

    if (t->err)
        return t->err;
    if (t->ncols > EGPU_KUBECTL_COLS_MAX)
        return -EINVAL;
    for (size_t r = 0; r < t->nrows; r++)
        for (size_t c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c];
            size_t l = s != NULL ? strlen(s) : 0;

            if (l > width[c])
                width[c] = l;
        }
    for (size_t r = 0; r < t->nrows && !rc; r++) {
        size_t last = 0, start = out->len;

        for (size_t c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c];

            if (s != NULL && s[0] != '\0')
                last = c;
        }
        for (size_t c = 0; c <= last && !rc; c++) {
            const char *s = t->cells[r * t->ncols + c];

            if (s == NULL)
                s = "";
            if (c < last)
                rc = egpu_buf_printf(out, "%-*s", (int)(width[c] + EGPU_KUBECTL_PADDING), s);
            else
                rc = egpu_buf_printf(out, "%s", s);
        }
        /* A row whose later cells are empty ends at its last text. */
        while (!rc && out->len > start && out->data[out->len - 1] == ' ')
            out->data[--out->len] = '\0';
        if (!rc)
            rc = egpu_buf_append(out, "\n", 1);
    }
    return rc;
}
