/* net/cli.c - command-line helpers shared by every binary (see egpu/cli.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/cli.h"

int egpu_cli_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", prog);
    return 2;
}

int egpu_cli_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    unsigned long long v;
    char *end;

    if (s == NULL || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

int egpu_cli_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v;

    if (s == NULL || *s == '\0')
        return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= lo && v <= hi))
        return -EINVAL;
    *out = v;
    return 0;
}

int egpu_cli_http_limit(const char *prog, const char *who, const char *v, bool seconds,
                        unsigned *out)
{
    uint64_t u;

    if (egpu_cli_parse_u64(v, 1, seconds ? 3600 : 65536, &u))
        return egpu_cli_usage_error(prog, "%s \"%s\": expected %s", who, v,
                                    seconds ? "seconds in 1..3600" : "connections in 1..65536");
    *out = (unsigned)u;
    return 0;
}

int egpu_cli_parse_bool(const char *s, bool *out)
{
    if (s != NULL && (strcmp(s, "true") == 0 || strcmp(s, "1") == 0)) {
        *out = true;
        return 0;
    }
    if (s != NULL && (strcmp(s, "false") == 0 || strcmp(s, "0") == 0)) {
        *out = false;
        return 0;
    }
    return -EINVAL;
}

int egpu_cli_parse(int argc, char **argv, const struct option *longopts, int version_opt,
                   const struct egpu_cli_env *env, size_t nenv, const char *prog,
                   const char *version, const char *usage, egpu_cli_apply_cb apply, void *ctx)
{
    int c, rc;

    for (size_t i = 0; i < nenv; i++) {
        const char *v = getenv(env[i].var);

        if (v != NULL && *v != '\0' && (rc = apply(ctx, env[i].opt, v, env[i].var)) != 0)
            return rc;
    }
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        const struct option *lo = longopts;
        char who[80];

        if (c == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        if (c == version_opt) {
            printf("%s %s\n", prog, version);
            return 0;
        }
        if (c == '?' || c == ':')
            return egpu_cli_usage_error(prog, "unknown or incomplete option \"%s\"",
                                        argv[optind - 1]);
        while (lo->name != NULL && lo->val != c)
            lo++;
        snprintf(who, sizeof(who), "--%s", lo->name ? lo->name : "?");
        rc = apply(ctx, c, optarg, who);
        if (rc)
            return rc;
    }
    if (optind < argc)
        return egpu_cli_usage_error(prog, "unexpected argument \"%s\"", argv[optind]);
    return -1;
}
