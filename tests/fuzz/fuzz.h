/* tests/fuzz/fuzz.h - what the libFuzzer targets of tests/fuzz share.
 *
 * Each target is one fuzz_<name>.c defining LLVMFuzzerTestOneInput (and
 * LLVMFuzzerInitialize where it needs set-up); docs/fuzzing.md lists them.
 * A broken invariant is a crash: FUZZ_CHECK prints it and aborts, so
 * libFuzzer saves the input.
 */
#ifndef EGPU_FUZZ_H
#define EGPU_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/core.h"
#include "egpu/log.h"

/* libFuzzer's entry points (prototypes for -Wmissing-prototypes). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* A NUL-terminated copy of len bytes (malloc'ed; the caller free()s). */
static inline char *fuzz_cstr(const uint8_t *data, size_t len)
{
    char *s = malloc(len + 1);

    FUZZ_CHECK(s != NULL);
    if (len > 0)
        memcpy(s, data, len);
    s[len] = '\0';
    return s;
}

/* An exact-size heap copy (malloc'ed, no terminator), so that ASan sees a
 * read one byte past the end of a length-delimited input. */
static inline char *fuzz_dup(const uint8_t *data, size_t len)
{
    char *s = malloc(len ? len : 1);

    FUZZ_CHECK(s != NULL);
    if (len > 0)
        memcpy(s, data, len);
    return s;
}

/* The next part of *data up to the separator sep (not included), advancing
 * past it; the last part runs to the end. Returns false when nothing is left. */
static inline bool fuzz_next_part(const uint8_t **data, size_t *len, const char *sep,
                                  const uint8_t **part, size_t *part_len)
{
    size_t seplen = strlen(sep);

    if (*data == NULL)
        return false;
    *part = *data;
    for (size_t i = 0; i + seplen <= *len; i++) {
        if (memcmp(*data + i, sep, seplen) == 0) {
            *part_len = i;
            *data += i + seplen;
            *len -= i + seplen;
            return true;
        }
    }
    *part_len = *len;
    *data = NULL;
    *len = 0;
    return true;
}

/* Quiet: nothing is logged (a fuzzer's stderr is its progress report). */
static inline void fuzz_quiet(void)
{
    egpu_log_level = -1;
}

#endif /* EGPU_FUZZ_H */
