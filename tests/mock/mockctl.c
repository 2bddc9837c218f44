/* tests/mock/mockctl.c - print or reset the mock CUDA driver's shared state
 * (the file named by EGPU_MOCK_CUDA_STATE; mock_device.h) for tests and
 * benchmarks. Test code, never shipped.
 *
 *   mockctl <state-file>             print the state (below)
 *   mockctl <state-file> reset-busy  zero busy time and launch counts of every
 *                                    card and tag from now on
 *
 * It never creates the file. Dead processes' memory is reclaimed first, as
 * any allocation would. Output, one record per line, fields key=value,
 * integers in decimal (bytes, nanoseconds of CLOCK_MONOTONIC, percent):
 *
 *   now_ns=<N>
 *   card <i> total_bytes=<N> used_bytes=<N> busy_ns=<N> launches=<N> busy_until_ns=<N>
 *       util_pct=<N> uuid=<uuid> name=<name>                      (one line per card)
 *   tag <name> card <i> busy_ns=<N> launches=<N>                 (tags with work there)
 *   proc <pid> card <i> used_bytes=<N>                           (processes holding memory)
 *
 * busy_ns counts elapsed device time only (queued work is not yet busy), from
 * the last reset-busy; util_pct is the busy fraction of the last second. In
 * names, spaces and '=' are written as '_' so every field splits on spaces.
 *
 * Exit status: 0, 1 when the state cannot be read (a message on stderr), 2 for
 * a usage error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_device.h"

/* Write s to out with spaces and '=' as '_'. */
static void put_word(FILE *out, const char *s, size_t max)
{
    for (size_t i = 0; i < max && s[i] != '\0'; i++)
        fputc(s[i] == ' ' || s[i] == '=' ? '_' : s[i], out);
}

/* Locked: print the state to out at now_ns. */
static void print_state(struct egpu_mock_dev *dev, FILE *out, uint64_t now_ns)
{
    struct egpu_mock_state *st = dev->st;

    fprintf(out, "now_ns=%llu\n", (unsigned long long)now_ns);
    for (unsigned c = 0; c < st->ncards; c++) {
        struct egpu_mock_card_stats s;

        egpu_mock_card_read(dev, c, now_ns, &s);
        fprintf(out,
                "card %u total_bytes=%llu used_bytes=%llu busy_ns=%llu launches=%llu "
                "busy_until_ns=%llu util_pct=%u uuid=",
                c, (unsigned long long)s.total_bytes, (unsigned long long)s.used_bytes,
                (unsigned long long)s.busy_ns, (unsigned long long)s.launches,
                (unsigned long long)s.busy_until_ns, s.util_pct);
        put_word(out, st->cards[c].uuid, sizeof(st->cards[c].uuid));
        fputs(" name=", out);
        put_word(out, st->cards[c].name, sizeof(st->cards[c].name));
        fputc('\n', out);
    }
    for (unsigned t = 0; t < st->ntags; t++) {
        for (unsigned c = 0; c < st->ncards; c++) {
            uint64_t busy = egpu_mock_tag_busy(dev, c, t, now_ns);
            uint64_t launches = st->tags[t].launches[c];

            if (busy == 0 && launches == 0)
                continue;
            fputs("tag ", out);
            put_word(out, st->tags[t].name, sizeof(st->tags[t].name));
            fprintf(out, " card %u busy_ns=%llu launches=%llu\n", c, (unsigned long long)busy,
                    (unsigned long long)launches);
        }
    }
    for (unsigned i = 0; i < EGPU_MOCK_PROCS_MAX; i++) {
        const struct egpu_mock_proc *p = &st->procs[i];

        for (unsigned c = 0; p->pid != 0 && c < st->ncards; c++) {
            if (p->used_bytes[c] > 0)
                fprintf(out, "proc %ld card %u used_bytes=%llu\n", (long)p->pid, c,
                        (unsigned long long)p->used_bytes[c]);
        }
    }
}

int main(int argc, char **argv)
{
    struct egpu_mock_dev dev;
    bool reset;
    char *text = NULL;
    size_t len = 0;
    FILE *out;
    int r;

    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "reset-busy") != 0)) {
        fprintf(stderr, "usage: mockctl <state-file> [reset-busy]\n");
        return 2;
    }
    reset = argc == 3;
    r = egpu_mock_dev_open(&dev, argv[1], false, false);
    if (r == -ENODATA) {
        fprintf(stderr, "mockctl: %s: not an initialised mock CUDA state\n", argv[1]);
        return 1;
    }
    if (r != 0) {
        fprintf(stderr, "mockctl: %s: %s\n", argv[1], strerror(-r));
        return 1;
    }
    out = open_memstream(&text, &len); /* printed after the lock is released */
    if (out == NULL || egpu_mock_lock(&dev) != 0) {
        fprintf(stderr, "mockctl: %s: cannot lock the state\n", argv[1]);
        if (out != NULL)
            fclose(out);
        free(text);
        egpu_mock_dev_close(&dev);
        return 1;
    }
    egpu_mock_reclaim(&dev);
    if (reset)
        egpu_mock_reset_busy(&dev, egpu_mock_now_ns());
    else
        print_state(&dev, out, egpu_mock_now_ns());
    egpu_mock_unlock(&dev);
    egpu_mock_dev_close(&dev);
    fclose(out);
    fputs(text, stdout);
    free(text);
    return fflush(stdout) == 0 ? 0 : 1;
}
