/* tests/unit/pb_fixture.h - the protobuf fixtures of ../shared/k8s-wire, for
 * the unit tests of the kubelet's messages (test_proto.c, test_dra_proto.c):
 * a fixture read whole, decoded with protobuf-c, and a message packed back
 * and compared with the fixture's bytes. The fixtures are read in place,
 * never copied into the repository. Include after testutil.h. */
#ifndef EGPU_TESTS_PB_FIXTURE_H
#define EGPU_TESTS_PB_FIXTURE_H

#include <protobuf-c/protobuf-c.h>

/* One fixture's bytes (data malloc'd, the caller frees it; len bytes). */
struct tu_fixture {
    uint8_t *data;
    size_t len;
};

/* Reads the whole file at path; skips the test (fails it under CI=true,
 * tu_skip) with missing when the file is not there. */
static inline struct tu_fixture tu_fixture_load(const char *path, const char *missing)
{
    struct tu_fixture fx = {0};
    FILE *f = fopen(path, "rb");
    long n;

    if (f == NULL)
        tu_skip(missing);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    fx.data = malloc((size_t)n + 1); /* + 1: an empty message still gets a buffer */
    assert_non_null(fx.data);
    assert_int_equal(fread(fx.data, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    fx.len = (size_t)n;
    return fx;
}

/* Decodes fx as desc, failing the test when it does not decode; the caller
 * frees the message (protobuf_c_message_free_unpacked). */
static inline ProtobufCMessage *tu_pb_decode(const ProtobufCMessageDescriptor *desc,
                                             const struct tu_fixture *fx)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, fx->len, fx->data);

    if (m == NULL)
        fail_msg("%s does not decode its fixture", desc->name);
    return m;
}

/* Packs m and asserts the bytes are exactly the fixture's. */
static inline void tu_pb_assert_packs_to(const ProtobufCMessage *m, const struct tu_fixture *fx)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *out = malloc(n + 1);

    assert_non_null(out);
    assert_int_equal(n, fx->len);
    assert_int_equal(protobuf_c_message_pack(m, out), n);
    assert_memory_equal(out, fx->data, n);
    free(out);
}

#endif /* EGPU_TESTS_PB_FIXTURE_H */
