/* net/tls_int.h - what the HTTPS server's two kinds of TLS files share
 * (private to src/net): the server's own certificate and key (http.c) and
 * the CA bundle its clients' certificates are checked against
 * (tls_client.c). Both are PEM files the operator owns (a Secret volume,
 * cert-manager's output), read at start and read again when they change.
 *
 *   - tls_files.c: reading a PEM file whole, and a watch that says, at most
 *     once per EGPU__TLS_CHECK_MS, whether a set of files changed since it
 *     was last read (stat(2): inode, size, mtime, ctime), and remembers a
 *     state that failed so that it is tried and logged once.
 *   - tls_client.c: the client certificate check (egpu__tls_client_*).
 *
 * Neither file is opened with O_NOFOLLOW: a Secret volume is made of
 * symbolic links (tls.crt -> ..data/tls.crt, ..data -> ..2024_...), and
 * the paths are the operator's, never a tenant's.
 */
#ifndef EGPU_NET_TLS_INT_H
#define EGPU_NET_TLS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <gnutls/gnutls.h>

#include "egpu/core.h"

#define EGPU__TLS_FILE_MAX  (1024 * 1024) /* a PEM file larger than this is not ours */
#define EGPU__TLS_CHECK_MS  1000          /* look at the files at most this often, ms */
#define EGPU__TLS_WATCH_MAX 2             /* files one watch follows */

/* The GnuTLS priority string of every TLS server of the project
 * (MHD_OPTION_HTTPS_PRIORITIES in http.c): GnuTLS's NORMAL set of ciphers,
 * key exchanges and signatures, with the protocol versions cut to TLS 1.3
 * and TLS 1.2 (NORMAL alone also offers TLS 1.0 and 1.1, which BSI TR-02102
 * and RFC 8996 retire). Syntax: the GnuTLS manual, "Priority strings". The
 * API servers and kube-scheduler (Go's crypto/tls) speak both. */
#define EGPU__TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

/* What tells, cheaply, that a file changed: its stat(2) (following links). */
struct egpu__file_id {
    int err; /* errno of a failed stat, else 0 (the rest then zero) */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
};

/* Read the PEM file at path whole into a NUL-terminated egpu_malloc'd
 * string (*out, *len bytes without the NUL; the caller egpu_free()s it,
 * after explicit_bzero when it holds a key), and the fstat(2) of what was
 * read into *id. Returns 0, -errno (open, read), -EMSGSIZE (over
 * EGPU__TLS_FILE_MAX), -EINVAL (empty file) or -ENOMEM; err names the
 * file. */
int egpu__read_pem(const char *path, char **out, size_t *len, struct egpu__file_id *id,
                   struct egpu_error *err) EGPU_MUST_CHECK;

/* A set of files read together (a certificate and its key; a CA bundle).
 * The caller zeroes it, sets paths and n, and records the state it read at
 * start with egpu__file_watch_loaded. Not thread-safe: the caller holds its
 * own lock around every call. */
struct egpu__file_watch {
    const char *paths[EGPU__TLS_WATCH_MAX];           /* borrowed; outlive the watch */
    unsigned n;                                       /* paths in use, 1..EGPU__TLS_WATCH_MAX */
    struct egpu__file_id loaded[EGPU__TLS_WATCH_MAX]; /* the state in service */
    struct egpu__file_id bad[EGPU__TLS_WATCH_MAX];    /* the last state that failed */
    struct egpu__file_id seen[EGPU__TLS_WATCH_MAX];   /* the state the last look found */
    bool has_bad;                                     /* bad holds such a state */
    struct timespec checked;                          /* CLOCK_MONOTONIC of the last look */
    uint64_t reloads, failures; /* states taken, and states that failed (each once) */
};

/* Is it time to read the files again? True when the last look was more
 * than EGPU__TLS_CHECK_MS ago and the files' state (stat now) is neither
 * the one in service nor the last one that failed. Never reads a file. */
bool egpu__file_watch_is_due(struct egpu__file_watch *w);

/* The files were read and their content taken: ids (n of them, as read)
 * are the state in service now; counts a reload unless first. */
void egpu__file_watch_loaded(struct egpu__file_watch *w, const struct egpu__file_id *ids,
                             bool first);

/* Reading the files failed: remember the state egpu__file_watch_is_due
 * found, so that it is not read, counted or logged again until the files
 * change once more. */
void egpu__file_watch_failed(struct egpu__file_watch *w);

/* ------------------------------------------------------------------------ */
/* Client certificates (tls_client.c)                                       */

struct egpu__tls_client; /* the CA bundle in service, its watch, the pinned name */

/* Read the CA bundle at ca_file (PEM, one or more certificates, each of
 * which becomes a trust anchor) and keep cn (the subject common name every
 * client certificate must have; NULL = any) for egpu__tls_client_verify.
 * Both strings are copied. On success writes *out (free with
 * egpu__tls_client_free). Returns 0, -EINVAL (no certificate in the file, a
 * block that does not parse, cn empty or longer than
 * EGPU_HTTP_TLS_CLIENT_CN_MAX bytes), -errno, -EMSGSIZE or -ENOMEM; err
 * names the file. */
int egpu__tls_client_new(const char *ca_file, const char *cn, struct egpu__tls_client **out,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* Free tc (NULL is a no-op). No verification may be running. */
void egpu__tls_client_free(struct egpu__tls_client *tc);

/* Check the certificate chain the peer of session presented, as GnuTLS
 * holds it once the client's Certificate message is in: the leaf and the
 * chain verify to a certificate of the CA bundle in service (read again
 * first when the file changed, at most once per EGPU__TLS_CHECK_MS), the
 * leaf is valid now and, when it names purposes, allows TLS client
 * authentication, and its subject has the pinned common name, exactly one.
 * Safe from any thread (serialised on tc's lock). Returns 0 when the
 * client is trusted, else -EACCES with why (a short reason for the log,
 * e.g. "no certificate", "signer not found") written into why[len]. */
int egpu__tls_client_verify(struct egpu__tls_client *tc, gnutls_session_t session, char *why,
                            size_t len) EGPU_MUST_CHECK;

/* The CA bundle's watch counts: *reloads bundles taken after a change,
 * *failures changes that could not be used (the previous bundle stayed).
 * Safe from any thread. */
void egpu__tls_client_counts(struct egpu__tls_client *tc, uint64_t *reloads, uint64_t *failures);

#endif /* EGPU_NET_TLS_INT_H */
