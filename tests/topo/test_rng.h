/* A fixed-seed xorshift for the topology tests' synthetic maps: the same
 * numbers on every run, so a failing map can be rebuilt. */
#ifndef HC_TEST_RNG_H
#define HC_TEST_RNG_H

#include <stdint.h>

static uint64_t rng_state = 88172645463325252ull;
static inline uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

#endif /* HC_TEST_RNG_H */
