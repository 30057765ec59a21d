/*
 * pingpong.c - micro-benchmark (not a test): latency, bandwidth, allreduce.
 *
 * run-sizes: 2   (needs n >= 2 for the point-to-point parts; ranks 0 and 1
 *                 do the ping-pong and bandwidth runs, the others wait.
 *                 With n == 1 only the allreduce line is printed.)
 *
 * Usage: mpiexec -n 2 ./pingpong [--quick]
 *
 * Output (rank 0, one measurement per line, machine-readable):
 *   pingpong <bytes> <half round-trip latency> us
 *   bw <bytes> <bandwidth> GB/s      (window of 64 Isend/Irecv + Waitall, then a
 *                                     4-byte ack; GB = 1e9 bytes)
 *   allreduce 8 <latency> us         (one double, MPI_SUM, all ranks)
 * Lines starting with '#' are comments.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const long sizes[] = {8, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define WINDOW 64

static long clampl(long v, long lo, long hi) { return v < lo ? lo : v > hi ? hi : v; }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int quick = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
    long scale = quick ? 10 : 1;

    char *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, 4194304) != 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    memset(buf, 1, 4194304);

    if (rank == 0) {
        printf("# tandem pingpong benchmark: %d ranks%s\n", size, quick ? " (quick)" : "");
        fflush(stdout);
    }

    if (size >= 2) {
        /* Latency. */
        for (int k = 0; k < NSIZES; k++) {
            long n = sizes[k];
            long iters = clampl(268435456L / n, 20, 20000) / scale;
            if (iters < 5)
                iters = 5;
            long warm = iters / 10 + 2;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = 0;
            for (long it = 0; it < warm + iters; it++) {
                if (it == warm)
                    t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
                }
            }
            double t = MPI_Wtime() - t0;
            if (rank == 0) {
                printf("pingpong %ld %.3f us\n", n, t / iters / 2 * 1e6);
                fflush(stdout);
            }
        }

        /* Windowed bandwidth. */
        MPI_Request reqs[WINDOW];
        for (int k = 0; k < NSIZES; k++) {
            long n = sizes[k];
            long loops = clampl(1073741824L / (WINDOW * n), 5, 1000) / scale;
            if (loops < 2)
                loops = 2;
            long warm = loops / 10 + 1;
            int ack = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = 0;
            for (long it = 0; it < warm + loops; it++) {
                if (it == warm)
                    t0 = MPI_Wtime();
                if (rank == 0) {
                    for (int w = 0; w < WINDOW; w++)
                        MPI_Isend(buf, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &reqs[w]);
                    MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
                    MPI_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    for (int w = 0; w < WINDOW; w++)
                        MPI_Irecv(buf, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &reqs[w]);
                    MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
                    MPI_Send(&ack, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
                }
            }
            double t = MPI_Wtime() - t0;
            if (rank == 0) {
                double gbs = (double)n * WINDOW * loops / t / 1e9;
                printf("bw %ld %.3f GB/s\n", n, gbs);
                fflush(stdout);
            }
        }
    } else if (rank == 0) {
        printf("# pingpong and bw need 2 ranks; skipped\n");
    }

    /* Allreduce latency, 8 bytes. */
    {
        long iters = 20000 / scale;
        long warm = iters / 10 + 2;
        double in = rank, out = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0;
        for (long it = 0; it < warm + iters; it++) {
            if (it == warm)
                t0 = MPI_Wtime();
            MPI_Allreduce(&in, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        double t = MPI_Wtime() - t0;
        double tmax = 0;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (out != size * (size - 1) / 2.0 && rank == 0)
            printf("# warning: allreduce result %g wrong\n", out);
        if (rank == 0) {
            printf("allreduce 8 %.3f us\n", tmax / iters * 1e6);
            fflush(stdout);
        }
    }

    free(buf);
    MPI_Finalize();
    return 0;
}
