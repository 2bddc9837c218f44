/* api/objects_int.h - what the decoders and encoders of src/api's objects
 * share (objects.c): typed readers of one field that name it by its path in
 * the manifest, metadata, conditions, and the names of the enums. Private to
 * src/api. */
#ifndef EGPU_API_OBJECTS_INT_H
#define EGPU_API_OBJECTS_INT_H

#include "egpu/api.h"

#define EGPU__CORE_ALLOWED "allowed: 1..99 to share one card, or a multiple of 100 for whole cards"

/* The child object o[key] into *out: NULL when absent or JSON null (an
 * error when required). path names o[key] in messages. Returns 0 or
 * EGPU_ESYNTAX. */
int egpu__api_object(const json_t *o, const char *key, const char *path, bool required,
                     const json_t **out, struct egpu_error *err);

/* The text o[key] into buf (len bytes incl. NUL): absent or null gives ""
 * (an error when required); nonempty refuses "". Returns 0 or EGPU_ESYNTAX
 * (not text, too long: "PATH is 300 bytes long; allowed: at most 253"). */
int egpu__api_text(const json_t *o, const char *key, const char *path, bool required, bool nonempty,
                   char *buf, size_t len, struct egpu_error *err);

/* The integer o[key] in min..max into *out, *has whether given (absent or
 * null: not given, an error when has is NULL). Returns 0, EGPU_ESYNTAX (not
 * an integer) or EGPU_ERANGE ("PATH is 150; allowed: 1..6400"; allowed
 * replaces the range when not NULL). */
int egpu__api_int(const json_t *o, const char *key, const char *path, int64_t min, int64_t max,
                  const char *allowed, int64_t *out, bool *has, struct egpu_error *err);

/* The text o[key], one of names[0..n), into *out (its index); *has whether
 * given (NULL: required). Returns 0, EGPU_ESYNTAX or EGPU_ERANGE ("PATH is
 * \"Done\"; allowed: Pending, Bound, Lost"). */
int egpu__api_enum(const json_t *o, const char *key, const char *path, const char *const *names,
                   size_t n, int *out, bool *has, struct egpu_error *err);

/* v as short JSON text for messages (at most len-1 bytes, "..." when cut). */
const char *egpu__api_json_text(const json_t *v, char *buf, size_t len);

/* obj's apiVersion and kind, when given, must be ours and kind. */
int egpu__api_check_kind(const json_t *obj, const char *kind, struct egpu_error *err);

/* metadata into *m; namespaced: metadata.namespace required. */
int egpu__api_meta_decode(const json_t *obj, bool namespaced, struct egpu_api_meta *m,
                          struct egpu_error *err);

/* A new object {apiVersion, kind, metadata} for m, or NULL (no memory). */
json_t *egpu__api_object_new(const char *kind, const struct egpu_api_meta *m);

/* status.conditions (list, may be absent) into c / *n. */
int egpu__api_conditions_decode(const json_t *status, struct egpu_api_condition *c, uint32_t *n,
                                struct egpu_error *err);
/* Conditions as a JSON array (new reference) or NULL (no memory). */
json_t *egpu__api_conditions_encode(const struct egpu_api_condition *c, uint32_t n);

/* o[key] = v (stolen); false when out of memory (v is released). */
bool egpu__api_set(json_t *o, const char *key, json_t *v);
/* o[key] = s unless s is ""; false when out of memory. */
bool egpu__api_set_text(json_t *o, const char *key, const char *s);

/* Copy s (of at most len-1 bytes, checked by the caller) into buf. */
void egpu__api_copy(char *buf, size_t len, const char *s);

/* A thousandths value as decimal text ("312", "19.5", "0.001"). */
const char *egpu__api_milli_text(int64_t milli, char *buf, size_t len);

/* A thousandths value as a JSON number: an integer when whole, else a real
 * that decodes to the same thousandths (new reference, NULL: no memory). */
json_t *egpu__api_milli_number(int64_t milli);

extern const char *const egpu__api_reclaim_names[2];
extern const char *const egpu__api_binding_names[2];
extern const char *const egpu__api_provisioner_names[2];

#endif /* EGPU_API_OBJECTS_INT_H */
