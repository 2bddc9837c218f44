/* tests/fuzz/fuzz_kubeconfig.c - the kubeconfig parser (src/kube/config.c:
 * egpu_kube_config_from_kubeconfig over libyaml, with its base64 decoder).
 *
 * The parser reads files, so the input is written to files in a private
 * temporary directory (made once per process, removed at exit). Input: an
 * optional first line "# context: NAME" (a YAML comment) names the context
 * to use; lines "# next-file" split the rest into up to three files, passed
 * as a ':'-separated list as in $KUBECONFIG (one file alone is passed alone).
 * The whole input also goes through egpu__kube_base64_decode.
 *
 * Invariants: success gives a config with an http(s) server and a
 * namespace, whose deep copy (egpu__kube_config_dup) succeeds; an error has
 * a message and a documented code; nothing leaks.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "fuzz.h"
#include "egpu/kube.h"
#include "kube_int.h"

#define FILES_MAX 3
#define CTX_LINE  "# context: "
#define NEXT_FILE "\n# next-file\n"

static char dir[64];

static void cleanup(void)
{
    char path[128];

    for (int i = 0; i < FILES_MAX; i++) {
        snprintf(path, sizeof(path), "%s/f%d.yaml", dir, i);
        (void)unlink(path);
    }
    (void)rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = getenv("TMPDIR");

    (void)argc;
    (void)argv;
    fuzz_quiet();
    snprintf(dir, sizeof(dir), "%s/egpu-fuzz-XXXXXX",
             tmp != NULL && tmp[0] != '\0' && strlen(tmp) < 32 ? tmp : "/tmp");
    FUZZ_CHECK(mkdtemp(dir) != NULL);
    atexit(cleanup);
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);

    FUZZ_CHECK(fd >= 0);
    while (len > 0) {
        ssize_t n = write(fd, data, len);

        FUZZ_CHECK(n > 0);
        data += n;
        len -= (size_t)n;
    }
    FUZZ_CHECK(close(fd) == 0);
}

static bool is_http(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char paths[FILES_MAX * 128], *context = NULL, *b64;
    struct egpu_kube_config *cfg = NULL, *copy = NULL;
    struct egpu_error err = {0};
    const uint8_t *part;
    size_t part_len, b64_len, plen = 0;
    long live = egpu_alloc_live();
    int nfiles = 0, rc;

    /* base64 first, over the whole input. */
    if (egpu__kube_base64_decode((const char *)data, size, &b64, &b64_len) == 0) {
        FUZZ_CHECK(b64_len <= size && b64[b64_len] == '\0');
        egpu_free(b64);
    }

    if (size > strlen(CTX_LINE) && memcmp(data, CTX_LINE, strlen(CTX_LINE)) == 0) {
        const uint8_t *nl = memchr(data, '\n', size);
        size_t end = nl ? (size_t)(nl - data) : size;

        context = fuzz_cstr(data + strlen(CTX_LINE), end - strlen(CTX_LINE));
    }
    paths[0] = '\0';
    while (nfiles < FILES_MAX && fuzz_next_part(&data, &size, NEXT_FILE, &part, &part_len)) {
        char path[128];

        snprintf(path, sizeof(path), "%s/f%d.yaml", dir, nfiles);
        /* The last file takes the rest, separators included. */
        if (nfiles == FILES_MAX - 1 && data != NULL)
            part_len += strlen(NEXT_FILE) + size;
        write_file(path, part, part_len);
        plen +=
            (size_t)snprintf(paths + plen, sizeof(paths) - plen, "%s%s", nfiles ? ":" : "", path);
        nfiles++;
    }
    rc = egpu_kube_config_from_kubeconfig(paths, context, &cfg, &err);
    if (rc == 0) {
        FUZZ_CHECK(cfg != NULL && cfg->server != NULL && is_http(cfg->server));
        FUZZ_CHECK(cfg->ns != NULL && cfg->ns[0] != '\0');
        FUZZ_CHECK(egpu__kube_config_dup(cfg, &copy) == 0);
        FUZZ_CHECK(strcmp(copy->server, cfg->server) == 0);
        egpu_kube_config_free(copy);
        egpu_kube_config_free(cfg);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
        FUZZ_CHECK(rc == -ENOENT || rc == EGPU_ESYNTAX || rc == -EINVAL || rc == -ENOTSUP ||
                   rc == -ENOMEM || rc == -EMSGSIZE);
    }
    free(context);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}
