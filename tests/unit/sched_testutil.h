/* tests/unit/sched_testutil.h - helpers shared by the extender's tests. */
#ifndef EGPU_SCHED_TESTUTIL_H
#define EGPU_SCHED_TESTUTIL_H

#include <jansson.h>
#include <stdbool.h>

/* ExtenderArgs text (caller free()s) for pod (reference stolen) and n node
 * names: the NodeNames form, or the NodeList form when full, whose items
 * carry labels and allocatable like the scheduler's cached Nodes. */
static inline char *tu_extender_args(json_t *pod, const char *const *nodes, int n, bool full)
{
    json_t *args = json_pack("{s:o}", "Pod", pod);
    json_t *list = json_array();
    char *text;

    for (int i = 0; i < n; i++)
        json_array_append_new(list, full ? json_pack("{s:{s:s,s:{s:s}},s:{s:{s:s}}}", "metadata",
                                                     "name", nodes[i], "labels", "zone", "a",
                                                     "status", "allocatable", "cpu", "64")
                                         : json_string(nodes[i]));
    if (full) {
        json_object_set_new(args, "Nodes", json_pack("{s:{},s:o}", "metadata", "items", list));
        json_object_set_new(args, "NodeNames", json_null());
    } else {
        json_object_set_new(args, "NodeNames", list);
        json_object_set_new(args, "Nodes", json_null());
    }
    text = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    return text;
}

#endif /* EGPU_SCHED_TESTUTIL_H */
