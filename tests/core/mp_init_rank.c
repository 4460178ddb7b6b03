/*
 * mp_init_rank DIR: a job built from a rendezvous of the program's own, as a
 * framework's store would do it (hcomm_bootstrap_address on rank 0, the
 * strings passed to every rank, hcomm_init_rank). The "store" is a file in
 * DIR; rank and size come from hcommrun's variables, read by the program.
 * Then an allreduce checks the job, and the argument errors are checked.
 */
#include "common/mp_test.h"

#include <stdbool.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mp_init_rank DIR\n");
        return 2;
    }
    int rank = atoi(getenv("HCOMM_RANK") ? getenv("HCOMM_RANK") : "0");
    int size = atoi(getenv("HCOMM_SIZE") ? getenv("HCOMM_SIZE") : "1");
    char path[512], tmp[560], url[128] = "", key[64] = "";
    snprintf(path, sizeof(path), "%s/store", argv[1]);

    /* argument errors first (no job yet) */
    hcomm_init_params_t bad = {.rank = size, .size = size, .local_rank = -1, .local_size = -1};
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_init_rank(&bad));
    mp_expect_msg("rank out of range", "hcomm_init_rank", "rank", "out of range", NULL);
    bad = (hcomm_init_params_t){.rank = 0, .size = 2, .local_rank = -1, .local_size = -1};
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_init_rank(&bad));
    mp_expect_msg("no bootstrap", "needs a bootstrap address", NULL);
    bad.bootstrap = "udp://x:1";
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_init_rank(&bad));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_init_rank(NULL));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_bootstrap_address(url, 10, key, sizeof(key)));

    if (rank == 0) {
        MP_OK(hcomm_bootstrap_address(url, sizeof(url), key, sizeof(key)));
        if (strncmp(url, "tcp://", 6) || strlen(key) != 32)
            mp_fail("hcomm_bootstrap_address gave \"%s\" and \"%s\"", url, key);
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%s %s\n", url, key) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
            mp_fail("cannot write %s", path);
            return 1;
        }
    } else {
        for (int i = 0; i < 3000; i++) { /* up to 30 s */
            FILE *f = fopen(path, "r");
            if (f) {
                int got = fscanf(f, "%127s %63s", url, key);
                fclose(f);
                if (got == 2)
                    break;
            }
            usleep(10000);
        }
    }
    hcomm_init_params_t p = {.rank = rank, .size = size, .local_rank = -1, .local_size = -1,
                             .bootstrap = url, .job_key = key};
    MP_OK(hcomm_init_rank(&p));
    mp_rank = rank;
    hcomm_comm_t w = hcomm_comm_world();
    if (hcomm_comm_rank(w) != rank || hcomm_comm_size(w) != size)
        mp_fail("world is rank %d of %d, expected %d of %d", hcomm_comm_rank(w),
                hcomm_comm_size(w), rank, size);
    int64_t v = rank + 1, sum = 0;
    MP_OK(hcomm_allreduce(&v, &sum, 1, HCOMM_INT64, HCOMM_SUM, w));
    if (sum != (int64_t)size * (size + 1) / 2)
        mp_fail("allreduce gave %lld, expected %lld", (long long)sum,
                (long long)size * (size + 1) / 2);
    MP_EXPECT(HCOMM_ERR_ALREADY_INITIALIZED, hcomm_init_rank(&p));
    MP_OK(hcomm_finalize());
    return mp_failures ? 1 : 0;
}
