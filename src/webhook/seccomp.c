/* webhook/seccomp.c - the seccomp guard of shared-GPU containers.
 *
 * A container that asks a gpu-core share (1..99) runs under the interposer
 * libegpu-vcuda.so, which the node agent loads through /etc/ld.so.preload
 * and configures through the read-only /etc/elastic-gpu/vcuda.conf. A
 * process that may make a user and mount namespace of its own
 * (`unshare -Urm`, which Kubernetes' default of no seccomp profile allows)
 * can mount over either and leave the limits behind. So every such
 * container gets a seccomp profile that refuses new namespaces, and a pod
 * that asks for something that lifts it is refused, naming the field
 * (docs/security.md, "The seccomp guard").
 *
 * The profile: cfg->seccomp_profile, a Localhost profile path relative to
 * the kubelet's seccomp directory (default EGPU_WEBHOOK_SECCOMP_PROFILE,
 * which deploy/agent installs on every GPU node), or "RuntimeDefault" for
 * clusters whose runtime's default profile refuses namespaces without
 * CAP_SYS_ADMIN (containerd's does; CRI-O's, containers/common's
 * seccomp.json, allows unshare, mount and clone with namespace flags).
 *
 * What lifts it, for a shared container (its securityContext):
 *   - privileged: true (the runtime applies no seccomp profile to it);
 *   - seccompProfile of any other type or path (Unconfined, RuntimeDefault
 *     where ours is Localhost, a Localhost profile of the tenant's own);
 *   - capabilities.add SYS_ADMIN or ALL (mount without a user namespace,
 *     and containerd's default profile then allows unshare and mount);
 * and the pod's spec.securityContext.seccompProfile of type Unconfined.
 * allowPrivilegeEscalation does not lift it: a seccomp filter stays on a
 * process across execve of a setuid program, and no capability outside
 * the container's bounding set can be gained.
 *
 * Only the pod is given the profile (/mutate, on CREATE): a workload's
 * template is checked but not changed, so installing the webhook does not
 * roll every GPU Deployment. The container's own securityContext member is
 * written; the patch is the diff (patch.c), so nothing else is touched.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "webhook_int.h"

const char *egpu__webhook_seccomp_profile(const struct egpu_webhook_config *cfg)
{
    return cfg->seccomp_profile ? cfg->seccomp_profile : EGPU_WEBHOOK_SECCOMP_PROFILE;
}

static bool runtime_default(const struct egpu_webhook_config *cfg)
{
    return strcmp(egpu__webhook_seccomp_profile(cfg), "RuntimeDefault") == 0;
}

/* Whether container (a core/v1 Container) asks a gpu-core share 1..99: the
 * containers the agent gives the interposer. A request that does not parse
 * is src/api's to refuse; it gets no interposer either. */
static bool shared(const json_t *container)
{
    struct egpu_api_gpu_ask ask;
    struct egpu_error err = {0};
    const char *name = egpu_api_str(json_object_get(container, "name"));

    if (egpu_api_container_gpu(container, name ? name : "", false, &ask, &err) != 0)
        return false;
    return ask.core_pct >= 1 && ask.core_pct <= 99;
}

/* Whether profile (a SeccompProfile object) is the one we give. */
static bool is_ours(const struct egpu_webhook_config *cfg, const json_t *profile)
{
    const char *type = egpu_api_str(json_object_get(profile, "type"));
    const char *path = egpu_api_str(json_object_get(profile, "localhostProfile"));

    if (type == NULL)
        return false;
    if (runtime_default(cfg))
        return strcmp(type, "RuntimeDefault") == 0 && path == NULL;
    return strcmp(type, "Localhost") == 0 && path != NULL &&
           strcmp(path, egpu__webhook_seccomp_profile(cfg)) == 0;
}

/* "[unset or ]type Localhost with localhostProfile elastic-gpu/shared-gpu.json" */
static void describe_ours(const struct egpu_webhook_config *cfg, bool or_unset, char *buf,
                          size_t len)
{
    if (runtime_default(cfg))
        snprintf(buf, len, "%stype RuntimeDefault", or_unset ? "unset or " : "");
    else
        snprintf(buf, len, "%stype Localhost with localhostProfile %s", or_unset ? "unset or " : "",
                 egpu__webhook_seccomp_profile(cfg));
}

/* A capability name as Kubernetes writes it ("SYS_ADMIN") or with the
 * kernel's prefix ("CAP_SYS_ADMIN"), any case. */
static bool lifts_guard(const char *cap)
{
    if (strncasecmp(cap, "CAP_", 4) == 0)
        cap += 4;
    return strcasecmp(cap, "SYS_ADMIN") == 0 || strcasecmp(cap, "ALL") == 0;
}

static void check_container(const struct egpu_webhook_config *cfg, const json_t *c, size_t i,
                            struct egpu_api_problems *p)
{
    const json_t *sc = json_object_get(c, "securityContext");
    const json_t *profile = json_object_get(sc, "seccompProfile");
    const json_t *add = json_object_get(json_object_get(sc, "capabilities"), "add");
    const char *name = egpu_api_str(json_object_get(c, "name"));
    char msg[EGPU_API_PROBLEM_MAX], ours[160];
    const json_t *cap;
    size_t k;

    if (name == NULL)
        name = "";
    if (json_is_true(json_object_get(sc, "privileged"))) {
        snprintf(msg, sizeof(msg),
                 "container \"%.63s\": spec.containers[%zu].securityContext.privileged is true; "
                 "a container with a gpu-core share (1..99) runs under a seccomp profile that "
                 "a privileged container escapes (allowed: false or unset)",
                 name, i);
        egpu__webhook_problem_add(p, msg);
    }
    if (profile != NULL && !json_is_null(profile) && !is_ours(cfg, profile)) {
        const char *type = egpu_api_str(json_object_get(profile, "type"));

        describe_ours(cfg, true, ours, sizeof(ours));
        snprintf(msg, sizeof(msg),
                 "container \"%.63s\": spec.containers[%zu].securityContext.seccompProfile.type "
                 "is %.40s; a container with a gpu-core share (1..99) must run under the "
                 "profile that refuses new namespaces (allowed: %s)",
                 name, i, type ? type : "not a string", ours);
        egpu__webhook_problem_add(p, msg);
    }
    json_array_foreach(add, k, cap)
    {
        const char *s = egpu_api_str(cap);

        if (s == NULL || !lifts_guard(s))
            continue;
        snprintf(msg, sizeof(msg),
                 "container \"%.63s\": spec.containers[%zu].securityContext.capabilities.add "
                 "has %.40s; a container with a gpu-core share (1..99) may not add SYS_ADMIN "
                 "or ALL (it could mount over /etc/elastic-gpu and leave its limits)",
                 name, i, s);
        egpu__webhook_problem_add(p, msg);
    }
}

void egpu__webhook_seccomp_check(const struct egpu_webhook_config *cfg, const json_t *spec,
                                 struct egpu_api_problems *p)
{
    const json_t *containers = json_object_get(spec, "containers");
    const json_t *pod_profile =
        json_object_get(json_object_get(spec, "securityContext"), "seccompProfile");
    const char *pod_type = egpu_api_str(json_object_get(pod_profile, "type"));
    bool any = false;
    const json_t *c;
    size_t i;

    json_array_foreach(containers, i, c)
    {
        if (!shared(c))
            continue;
        any = true;
        check_container(cfg, c, i, p);
    }
    if (any && pod_type != NULL && strcmp(pod_type, "Unconfined") == 0) {
        char msg[EGPU_API_PROBLEM_MAX], ours[160];

        describe_ours(cfg, true, ours, sizeof(ours));
        snprintf(msg, sizeof(msg),
                 "spec.securityContext.seccompProfile.type is Unconfined; a pod with a "
                 "gpu-core share (1..99) runs its shared containers under the profile that "
                 "refuses new namespaces (allowed: %s)",
                 ours);
        egpu__webhook_problem_add(p, msg);
    }
}

int egpu__webhook_seccomp_apply(const struct egpu_webhook_config *cfg, json_t *spec)
{
    json_t *c;
    size_t i;

    json_array_foreach(json_object_get(spec, "containers"), i, c)
    {
        json_t *sc, *profile;
        const json_t *have;

        if (!shared(c))
            continue;
        sc = json_object_get(c, "securityContext");
        have = json_object_get(sc, "seccompProfile");
        if (have != NULL && !json_is_null(have))
            continue; /* ours already, or refused by egpu__webhook_seccomp_check */
        if (!json_is_object(sc)) {
            sc = json_object();
            if (sc == NULL || json_object_set_new(c, "securityContext", sc) != 0)
                return -ENOMEM;
        }
        profile = json_object();
        if (profile == NULL || json_object_set_new(sc, "seccompProfile", profile) != 0)
            return -ENOMEM;
        if (runtime_default(cfg)) {
            if (json_object_set_new(profile, "type", json_string("RuntimeDefault")) != 0)
                return -ENOMEM;
        } else if (json_object_set_new(profile, "type", json_string("Localhost")) != 0 ||
                   json_object_set_new(profile, "localhostProfile",
                                       json_string(egpu__webhook_seccomp_profile(cfg))) != 0) {
            return -ENOMEM;
        }
    }
    return 0;
}
