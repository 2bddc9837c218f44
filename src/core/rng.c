/* core/rng.c - seeded pseudo-random numbers and a seeded string hash.
 *
 * xoshiro256** (Blackman and Vigna), seeded through splitmix64, so one 64-bit
 * seed gives the same stream on every platform: a replay with seed 42 is
 * reproducible anywhere. Not for cryptography.
 */
#include "egpu/core.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void egpu_rng_seed(struct egpu_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

uint64_t egpu_rng_next(struct egpu_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t egpu_rng_below(struct egpu_rng *r, uint64_t n)
{
    /* Rejection sampling: drop the top partial block so every value in
     * [0, n) is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;

    do {
        x = egpu_rng_next(r);
    } while (x >= limit);
    return x % n;
}

uint64_t egpu_hash_str(const char *s, uint64_t seed)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    h ^= seed;
    return splitmix64(&h);
}
