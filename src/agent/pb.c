/* agent/pb.c - the protobuf-c glue: an allocator on egpu_malloc/egpu_free
 * for every unpack of the kubelet's messages, packing into an egpu_buf, and
 * unpacking a gRPC request (pb_int.h).
 */
#include <errno.h>
#include <stdint.h>

#include "pb_int.h"

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return egpu_malloc(size);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    egpu_free(p);
}

ProtobufCAllocator egpu__pb_allocator = {pb_alloc, pb_free, NULL};

struct pb_sink {
    ProtobufCBuffer base;
    struct egpu_buf *b;
    int rc;
};

static void pb_append(ProtobufCBuffer *base, size_t len, const uint8_t *data)
{
    struct pb_sink *s = (struct pb_sink *)base;

    if (s->rc == 0)
        s->rc = egpu_buf_append(s->b, data, len);
}

int egpu__pb_pack(const ProtobufCMessage *m, struct egpu_buf *b)
{
    struct pb_sink s = {.base = {.append = pb_append}, .b = b, .rc = 0};

    protobuf_c_message_pack_to_buffer(m, &s.base);
    return s.rc;
}

ProtobufCMessage *egpu__pb_unpack(const ProtobufCMessageDescriptor *d,
                                  const struct egpu_grpc_request *req)
{
    return protobuf_c_message_unpack(d, &egpu__pb_allocator, req->len, (const uint8_t *)req->data);
}

void egpu__pb_unpacked_free(ProtobufCMessage *m)
{
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, &egpu__pb_allocator);
}
