/* core/uuid.c - GPU UUIDs as text and as bytes (see egpu/core.h). */
#include <errno.h>
#include <string.h>

#include "egpu/core.h"

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int egpu_gpu_uuid_parse(const char *s, uint8_t out[EGPU_GPU_UUID_BYTES])
{
    static const unsigned dash_at[] = {8, 13, 18, 23}; /* after "GPU-" */
    uint8_t b[EGPU_GPU_UUID_BYTES];
    unsigned nib = 0, d = 0;

    if (strncmp(s, "GPU-", 4) != 0)
        return -EINVAL;
    s += 4;
    for (unsigned i = 0; s[i] != '\0'; i++) {
        int v;

        if (d < 4 && i == dash_at[d]) {
            if (s[i] != '-')
                return -EINVAL;
            d++;
            continue;
        }
        v = hex_value(s[i]);
        if (v < 0 || nib >= 2 * EGPU_GPU_UUID_BYTES)
            return -EINVAL;
        if (nib % 2 == 0)
            b[nib / 2] = (uint8_t)(v << 4);
        else
            b[nib / 2] |= (uint8_t)v;
        nib++;
    }
    if (nib != 2 * EGPU_GPU_UUID_BYTES || d != 4)
        return -EINVAL;
    memcpy(out, b, sizeof(b));
    return 0;
}

char *egpu_gpu_uuid_format(const uint8_t b[EGPU_GPU_UUID_BYTES], char *buf)
{
    static const char hex[] = "0123456789abcdef";
    char *p = buf;

    memcpy(p, "GPU-", 4);
    p += 4;
    for (int i = 0; i < EGPU_GPU_UUID_BYTES; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[b[i] >> 4];
        *p++ = hex[b[i] & 0xf];
    }
    *p = '\0';
    return buf;
}
