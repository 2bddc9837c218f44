/* api/podclaims.c - the claims a pod uses: its annotations
 * egpuc.elasticgpu.io/<container>: <claim name>, and the annotations the
 * scheduler leaves on a WaitForFirstConsumer claim. No I/O. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"

#define PREFIX_LEN (sizeof(EGPU_ANN_CLAIM_PREFIX) - 1)

static bool lower_alnum(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

/* A DNS-1123 label of at most 63 bytes: [a-z0-9]([-a-z0-9]*[a-z0-9])? */
static bool dns_label(const char *s, size_t len)
{
    if (len == 0 || len > 63 || !lower_alnum(s[0]) || !lower_alnum(s[len - 1]))
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!lower_alnum(s[i]) && s[i] != '-')
            return false;
    }
    return true;
}

bool egpu_api_dns_subdomain(const char *s)
{
    size_t len = s != NULL ? strlen(s) : 0;
    const char *p = s, *dot;

    if (len == 0 || len > 253)
        return false;
    for (;;) {
        dot = strchr(p, '.');
        if (!dns_label(p, dot != NULL ? (size_t)(dot - p) : strlen(p)))
            return false;
        if (dot == NULL)
            return true;
        p = dot + 1;
    }
}

bool egpu_api_dns_label(const char *s)
{
    return s != NULL && dns_label(s, strlen(s));
}

static int pod_claims(const json_t *pod, struct egpu_api_pod_claim *out, size_t max, size_t *n,
                      struct egpu_error *err)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const json_t *ann = json_object_get(meta, "annotations"), *v;
    const char *ns = egpu_api_str(json_object_get(meta, "namespace"));
    const char *key;

    *n = 0;
    if (ann == NULL || json_is_null(ann))
        return 0;
    if (!json_is_object(ann))
        return egpu_error_set(err, EGPU_ESYNTAX, "metadata.annotations is not an object");
    json_object_foreach((json_t *)ann, key, v)
    {
        const char *ctr = key + PREFIX_LEN, *val = egpu_api_str(v), *slash;

        if (strncmp(key, EGPU_ANN_CLAIM_PREFIX, PREFIX_LEN) != 0)
            continue;
        if (!egpu_api_dns_label(ctr))
            return egpu_error_set(err, EGPU_ERANGE,
                                  "annotation %.80s: \"%.63s\" is not a container name; "
                                  "allowed: " EGPU_ANN_CLAIM_PREFIX
                                  "<container>, a DNS label of at most 63 "
                                  "bytes ([a-z0-9-])",
                                  key, ctr);
        if (val == NULL)
            return egpu_error_set(err, EGPU_ESYNTAX, "annotation %s is not text", key);
        slash = strchr(val, '/');
        if (slash != NULL && ns != NULL && (size_t)(slash - val) == strlen(ns) &&
            strncmp(val, ns, strlen(ns)) == 0)
            val = slash + 1; /* "<own namespace>/<claim>" names the same claim */
        else if (slash != NULL)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "annotation %s: claim \"%.253s\" is in another namespace; "
                                  "allowed: the name of an ElasticGPUClaim in the pod's own "
                                  "namespace%s%s",
                                  key, val, ns != NULL ? " " : "", ns != NULL ? ns : "");
        if (!egpu_api_dns_subdomain(val))
            return egpu_error_set(err, EGPU_ERANGE,
                                  "annotation %s: \"%.253s\" is not a claim name; allowed: a DNS "
                                  "subdomain of at most 253 bytes ([a-z0-9.-])",
                                  key, val);
        for (size_t i = 0; i < *n; i++) {
            if (strcmp(out[i].claim, val) == 0)
                return egpu_error_set(err, EGPU_ERANGE,
                                      "annotations %s%s and %s: containers %s and %s both use "
                                      "claim %s; allowed: one container per claim",
                                      EGPU_ANN_CLAIM_PREFIX, out[i].container, key,
                                      out[i].container, ctr, val);
        }
        if (*n == max)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "the pod uses more than %zu claims; allowed: at most %zu", max,
                                  max);
        snprintf(out[*n].container, sizeof(out[*n].container), "%s", ctr);
        snprintf(out[*n].claim, sizeof(out[*n].claim), "%s", val);
        (*n)++;
    }
    return 0;
}

int egpu_api_pod_claims(const json_t *pod, struct egpu_api_pod_claim *out, size_t max, size_t *n,
                        struct egpu_error *err)
{
    int rc = pod_claims(pod, out, max, n, err);

    if (rc != 0)
        *n = 0;
    return rc;
}

const char *egpu_api_pod_claim_of(const struct egpu_api_pod_claim *pc, size_t n,
                                  const char *container)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(pc[i].container, container) == 0)
            return pc[i].claim;
    }
    return NULL;
}
