/* kube/event.c - posting a core/v1 Event about an object.
 *
 * Events are how a component tells an operator about one object without
 * them reading its logs: `kubectl describe` shows them. The body follows
 * core/v1 Event as kubectl and client-go's EventRecorder write it:
 * generateName from the object's name, involvedObject naming the object,
 * type, reason, message, source and the reporting fields, first and last
 * timestamp (RFC 3339, UTC) and count 1. Events about a cluster-scoped
 * object go into "default", as the EventRecorder puts them.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kube_int.h"

int egpu_kube_event_post(struct egpu_kube *kc, const struct egpu_kube_event *ev,
                         struct egpu_error *err)
{
    const char *ns = ev->involved_ns && ev->involved_ns[0] ? ev->involved_ns : "default";
    char stamp[32], gen[EGPU_KUBE_NAME_MAX + 2];
    struct egpu_kube_status st;
    struct timespec now;
    struct tm tm;
    json_t *body;
    int rc;

    if (ev->kind == NULL || ev->name == NULL || ev->reason == NULL || ev->message == NULL ||
        ev->component == NULL)
        return egpu_error_set(err, -EINVAL,
                              "event: kind, name, reason, message and component "
                              "are required");
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(gen, sizeof(gen), "%.*s.", EGPU_KUBE_NAME_MAX - 1, ev->name);
    body = json_pack(
        "{s:{s:s,s:s},s:{s:s,s:s,s:s,s:s*,s:s*},s:s,s:s,s:s,s:{s:s,s:s*},s:s,s:s,"
        "s:i,s:s,s:s*}",
        "metadata", "generateName", gen, "namespace", ns, "involvedObject", "kind", ev->kind,
        "apiVersion", ev->api_version ? ev->api_version : "v1", "name", ev->name, "namespace",
        ev->involved_ns && ev->involved_ns[0] ? ev->involved_ns : NULL, "uid",
        ev->uid && ev->uid[0] ? ev->uid : NULL, "type", ev->warning ? "Warning" : "Normal",
        "reason", ev->reason, "message", ev->message, "source", "component", ev->component, "host",
        ev->host, "firstTimestamp", stamp, "lastTimestamp", stamp, "count", 1, "reportingComponent",
        ev->component, "reportingInstance", ev->host);
    if (body == NULL)
        return egpu_error_set(err, -ENOMEM, "event %s on %s %s: out of memory", ev->reason,
                              ev->kind, ev->name);
    rc = egpu_kube_create(kc, &egpu_kube_events, ns, body, NULL, &st, err);
    json_decref(body);
    return rc;
}
