/* tests/fuzz/fuzz_status.c - the API Status parser (src/kube/status.c:
 * egpu_kube_status_parse), which reads every failed reply's body.
 *
 * Input: two bytes of HTTP status (big-endian, taken modulo 1000), then the
 * body. Invariants: never fails on malformed input (0 or -EPROTO); reason
 * and message are NUL-terminated within their arrays; a Status gives a code
 * in 1..999 (or the HTTP status); egpu_kube_status_errno gives 0 or a
 * negative code.
 */
#include <errno.h>

#include "fuzz.h"
#include "egpu/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct egpu_kube_status st;
    long http;
    char *body;
    int rc;

    if (size < 2)
        return 0;
    http = ((long)data[0] << 8 | data[1]) % 1000;
    body = fuzz_dup(data + 2, size - 2);
    memset(&st, 0xa5, sizeof(st));
    rc = egpu_kube_status_parse(size > 2 ? body : NULL, size - 2, http, &st);
    FUZZ_CHECK(rc == 0 || rc == -EPROTO);
    FUZZ_CHECK(memchr(st.reason, '\0', sizeof(st.reason)) != NULL);
    FUZZ_CHECK(memchr(st.message, '\0', sizeof(st.message)) != NULL);
    FUZZ_CHECK(rc != 0 || (st.code > 0 && st.code < 1000) || st.code == (int)http);
    FUZZ_CHECK(egpu_kube_status_errno(&st) <= 0);
    free(body);
    return 0;
}
