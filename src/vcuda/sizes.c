/* vcuda/sizes.c - how many bytes of device memory an allocation counts.
 *
 * DESIGN: the driver hands out device memory in pages of 2 MiB (the
 * granularity cuMemGetAllocationGranularity reports for device memory), so
 * every allocation counts its size rounded up to 2 MiB: a limit of L MiB
 * admits exactly floor(L / 2) allocations of 1 byte. Arrays count their
 * texels (the driver's own layout padding is not visible through the API),
 * mipmapped arrays the sum of their levels. Arithmetic saturates: a size
 * that overflows counts UINT64_MAX and can never fit.
 *
 * Source of the formats and flags: the CUDA driver API (CUarray_format,
 * CUDA_ARRAY3D_* flags of cuda.h).
 */
#include <stdint.h>

#include "vcuda_int.h"

#define ARRAY3D_LAYERED          0x01
#define ARRAY3D_CUBEMAP          0x04
#define ARRAY3D_SPARSE           0x40
#define ARRAY3D_DEFERRED_MAPPING 0x80
#define UNKNOWN_ELEMENT_BYTES    16 /* four channels of four bytes: an upper bound */

uint64_t egpu__vcuda_round(uint64_t bytes)
{
    uint64_t g = EGPU_VCUDA_GRANULARITY_BYTES;

    if (bytes > UINT64_MAX - (g - 1))
        return UINT64_MAX;
    return (bytes + g - 1) / g * g;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;

    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Bytes of one element: per channel for the plain formats (times
 * channels), whole for the formats that name their channels. */
static uint64_t element_bytes(int format, unsigned channels)
{
    switch (format) {
    case 0x01: /* UNSIGNED_INT8 */
    case 0x08: /* SIGNED_INT8 */
        return channels;
    case 0x02: /* UNSIGNED_INT16 */
    case 0x09: /* SIGNED_INT16 */
    case 0x10: /* HALF */
        return 2ULL * channels;
    case 0x03: /* UNSIGNED_INT32 */
    case 0x0a: /* SIGNED_INT32 */
    case 0x20: /* FLOAT */
        return 4ULL * channels;
    case 0xc0: /* UNORM_INT8X1 */
    case 0xc6: /* SNORM_INT8X1 */
        return 1;
    case 0xc1: /* UNORM_INT8X2 */
    case 0xc7: /* SNORM_INT8X2 */
    case 0xc3: /* UNORM_INT16X1 */
    case 0xc9: /* SNORM_INT16X1 */
        return 2;
    case 0xc2: /* UNORM_INT8X4 */
    case 0xc8: /* SNORM_INT8X4 */
    case 0xc4: /* UNORM_INT16X2 */
    case 0xca: /* SNORM_INT16X2 */
    case 0x50: /* UNORM_INT_101010_2 */
        return 4;
    case 0xc5: /* UNORM_INT16X4 */
    case 0xcb: /* SNORM_INT16X4 */
        return 8;
    default:
        return UNKNOWN_ELEMENT_BYTES;
    }
}

static uint64_t half(uint64_t v)
{
    return v > 1 ? v / 2 : 1;
}

uint64_t egpu__vcuda_array_bytes(uint64_t width, uint64_t height, uint64_t depth, int format,
                                 unsigned channels, unsigned flags, unsigned levels)
{
    uint64_t elem = element_bytes(format, channels ? channels : 1), total = 0;
    bool depth_halves = !(flags & (ARRAY3D_LAYERED | ARRAY3D_CUBEMAP));

    if (flags & (ARRAY3D_SPARSE | ARRAY3D_DEFERRED_MAPPING))
        return 0;
    height = height ? height : 1;
    depth = depth ? depth : 1;
    width = width ? width : 1;
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        total = add_sat(total, mul_sat(mul_sat(mul_sat(width, height), depth), elem));
        width = half(width);
        height = half(height);
        if (depth_halves)
            depth = half(depth);
    }
    return total;
}
