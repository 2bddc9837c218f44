/* webhook/template.c - where the pod lies in each object the webhook reads.
 *
 * A Pod is its own template (metadata, spec). The workload kinds carry a
 * PodTemplateSpec: apps/v1 Deployment, StatefulSet, DaemonSet and
 * ReplicaSet and batch/v1 Job at spec.template, batch/v1 CronJob at
 * spec.jobTemplate.spec.template. Checking the template refuses a bad
 * request at `kubectl apply` instead of later, in a controller's events,
 * for every pod it would create.
 */
#include <string.h>

#include "webhook_int.h"

struct kind_entry {
    const char *group, *version, *kind;
    const char *const *segs;
    size_t nsegs;
};

static const char *const tmpl[] = {"spec", "template"};
static const char *const cron[] = {"spec", "jobTemplate", "spec", "template"};

static const struct kind_entry kinds[] = {
    {"", "v1", "Pod", NULL, 0},
    {"apps", "v1", "Deployment", tmpl, 2},
    {"apps", "v1", "StatefulSet", tmpl, 2},
    {"apps", "v1", "DaemonSet", tmpl, 2},
    {"apps", "v1", "ReplicaSet", tmpl, 2},
    {"batch", "v1", "Job", tmpl, 2},
    {"batch", "v1", "CronJob", cron, 4},
};

bool egpu__webhook_podpart_find(const char *group, const char *version, const char *kind,
                                const json_t *obj, struct egpu__webhook_podpart *out)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        const struct kind_entry *k = &kinds[i];
        const json_t *t = obj;
        const json_t *ann;

        if (strcmp(group, k->group) != 0 || strcmp(version, k->version) != 0 ||
            strcmp(kind, k->kind) != 0)
            continue;
        for (size_t s = 0; s < k->nsegs; s++)
            t = json_object_get(t, k->segs[s]);
        memset(out, 0, sizeof(*out));
        out->is_pod = k->nsegs == 0;
        out->segs = k->segs;
        out->nsegs = k->nsegs;
        out->metadata =
            json_is_object(json_object_get(t, "metadata")) ? json_object_get(t, "metadata") : NULL;
        ann = json_object_get(out->metadata, "annotations");
        out->annotations = json_is_object(ann) ? ann : NULL;
        out->spec = json_is_object(json_object_get(t, "spec")) ? json_object_get(t, "spec") : NULL;
        return true;
    }
    return false;
}
