/* An external program against an installed hcomm (tests/install): one rank,
 * init, an in-place allreduce, finalize. Prints what it ran on. */
#include <hcomm.h>
#include <stdio.h>

int main(void)
{
    float v[1024];
    hcomm_status_t st = hcomm_init(NULL, NULL);
    if (st != HCOMM_OK) {
        fprintf(stderr, "hcomm_init: %s: %s\n", hcomm_strerror(st), hcomm_last_error());
        return 1;
    }
    hcomm_comm_t world = hcomm_comm_world();
    for (int i = 0; i < 1024; i++)
        v[i] = (float)i;
    st = hcomm_allreduce(v, v, 1024, HCOMM_FLOAT32, HCOMM_SUM, world);
    if (st != HCOMM_OK) {
        fprintf(stderr, "hcomm_allreduce: %s: %s\n", hcomm_strerror(st), hcomm_last_error());
        return 1;
    }
    for (int i = 0; i < 1024; i++) {
        if (v[i] != (float)i * (float)hcomm_comm_size(world)) {
            fprintf(stderr, "allreduce: v[%d] = %g\n", i, (double)v[i]);
            return 1;
        }
    }
    printf("%s: rank %d of %d, allreduce ok\n", hcomm_version_string(),
           hcomm_comm_rank(world), hcomm_comm_size(world));
    st = hcomm_finalize();
    if (st != HCOMM_OK) {
        fprintf(stderr, "hcomm_finalize: %s\n", hcomm_strerror(st));
        return 1;
    }
    return 0;
}
