/*
 * One-sided latency between 2 ranks, the way osu_put_latency measures it
 * with its default window (MPI_Win_allocate) and synchronization (one
 * MPI_Win_lock, then a transfer and MPI_Win_flush per iteration): MPI_Put,
 * MPI_Get and MPI_Accumulate (MPI_SUM of longs) of 8 B to 1 MiB, in
 * microseconds per transfer + flush. Built with mpicc.mpich and run
 * unchanged on MPICH and on tandem: benches/mpi/rma-compare.sh.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) {
        if (rank == 0)
            fprintf(stderr, "rma_bench: run on 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int max = 1 << 20;
    char *base;
    MPI_Win win;
    MPI_Win_allocate(max, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    char *buf = malloc(max);
    memset(buf, 1, max);
    const int sizes[] = {8, 1024, 65536, 1 << 20};
    if (rank == 0)
        printf("%-8s %10s %10s %10s\n", "bytes", "put_us", "get_us", "acc_us");
    for (int s = 0; s < 4; s++) {
        int len = sizes[s], iters = len >= 65536 ? 1000 : 20000;
        if (rank == 0) {
            double t[3];
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            for (int i = 0; i < 100; i++) {
                MPI_Put(buf, len, MPI_CHAR, 1, 0, len, MPI_CHAR, win);
                MPI_Win_flush(1, win);
            }
            for (int k = 0; k < 3; k++) {
                double t0 = MPI_Wtime();
                for (int i = 0; i < iters; i++) {
                    if (k == 0)
                        MPI_Put(buf, len, MPI_CHAR, 1, 0, len, MPI_CHAR, win);
                    else if (k == 1)
                        MPI_Get(buf, len, MPI_CHAR, 1, 0, len, MPI_CHAR, win);
                    else
                        MPI_Accumulate(buf, len / 8, MPI_LONG, 1, 0, len / 8, MPI_LONG, MPI_SUM,
                                       win);
                    MPI_Win_flush(1, win);
                }
                t[k] = (MPI_Wtime() - t0) / iters * 1e6;
            }
            MPI_Win_unlock(1, win);
            printf("%-8d %10.3f %10.3f %10.3f\n", len, t[0], t[1], t[2]);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_free(&win);
    free(buf);
    MPI_Finalize();
    return 0;
}
