/*
 * init_probe: how long hcomm_init takes at a job size (tests/perf/init_scale.sh,
 * docs/bootstrap.md "Init time by job size").
 *
 *   hcommrun -n N init_probe
 *
 * Every rank times its hcomm_init (CLOCK_MONOTONIC: one clock for all the
 * ranks of a machine), then a barrier; rank 0 prints one line:
 *   init_probe: N ranks: rank0 R ms slowest S ms last-call-to-done L ms barrier B ms
 * where slowest is the longest hcomm_init of any rank (it includes waiting
 * for the ranks the launcher started last) and last-call-to-done the time
 * from the latest rank's call to the latest return (the rendezvous once
 * everybody is there). Built with -DINIT_PROBE_MPI (init_scale.sh does, with
 * mpicc) it times MPI_Init the same way.
 */
#ifdef INIT_PROBE_MPI
#include <mpi.h>
#else
#include <hcomm.h>
#endif
#include <stdio.h>
#include <time.h>

static double probe_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double t0 = probe_now(), t1, t2, t3;
    int rank, size;
#ifdef INIT_PROBE_MPI
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
    t1 = probe_now();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    t2 = probe_now();
    MPI_Barrier(MPI_COMM_WORLD);
    t3 = probe_now();
    double mine[2] = {t1 - t0, t1}, most[2];
    MPI_Allreduce(mine, most, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#else
    if (hcomm_init(&argc, &argv) != HCOMM_OK) {
        fprintf(stderr, "init_probe: hcomm_init: %s\n", hcomm_last_error());
        return 1;
    }
    t1 = probe_now();
    hcomm_comm_t w = hcomm_comm_world();
    rank = hcomm_comm_rank(w);
    size = hcomm_comm_size(w);
    t2 = probe_now();
    if (hcomm_barrier(w) != HCOMM_OK) {
        fprintf(stderr, "init_probe: hcomm_barrier: %s\n", hcomm_last_error());
        return 1;
    }
    t3 = probe_now();
    /* the longest init, the latest return */
    double mine[2] = {t1 - t0, t1}, most[2];
    if (hcomm_allreduce(mine, most, 2, HCOMM_FLOAT64, HCOMM_MAX, w) != HCOMM_OK) {
        fprintf(stderr, "init_probe: hcomm_allreduce: %s\n", hcomm_last_error());
        return 1;
    }
#endif
    /* the latest call: the latest start among the ranks (max of t0) */
    double start_latest;
#ifdef INIT_PROBE_MPI
    MPI_Allreduce(&t0, &start_latest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#else
    if (hcomm_allreduce(&t0, &start_latest, 1, HCOMM_FLOAT64, HCOMM_MAX, w) != HCOMM_OK) return 1;
#endif
    if (rank == 0)
        printf("init_probe: %d ranks: rank0 %.1f ms slowest %.1f ms last-call-to-done %.1f ms "
               "barrier %.1f ms\n",
               size, (t1 - t0) * 1e3, most[0] * 1e3, (most[1] - start_latest) * 1e3,
               (t3 - t2) * 1e3);
#ifdef INIT_PROBE_MPI
    MPI_Finalize();
#else
    if (hcomm_finalize() != HCOMM_OK) return 1;
#endif
    return 0;
}
