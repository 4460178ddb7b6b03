/*
 * mpi_ref: the Open MPI reference numbers for docs/tcp.md, measured the way
 * bench/pingpong and bench/allreduce_bw measure hcomm: 8-byte ping-pong
 * half round trip, and 32 MiB float allreduce bus bandwidth
 * (2 (n-1)/n * bytes / time). Built only when mpicc exists.
 *   mpi_ref [BYTES]   the allreduce size (default 32 MiB)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char b[8] = {0};
    int iters = 10000;
    for (int pass = 0; pass < 2; pass++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            if (rank == 0) {
                MPI_Send(b, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(b, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(b, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(b, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (rank == 0 && pass == 1)
            printf("pingpong 8 B: %.2f us (half round trip)\n", t / iters / 2 * 1e6);
    }
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (32u << 20);
    size_t n = bytes / sizeof(float);
    float *s = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        s[i] = (float)(i % 7);
    int it = 10;
    MPI_Allreduce(s, r, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < it; i++)
        MPI_Allreduce(s, r, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / it;
    if (rank == 0)
        printf("allreduce %zu bytes float: %.2f ms, busbw %.2f GB/s\n", n * sizeof(float), t * 1e3,
               2.0 * (size - 1) / size * (double)(n * sizeof(float)) / t / 1e9);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
