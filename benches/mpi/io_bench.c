/*
 * MPI-IO throughput, the same binary on any MPICH-ABI library: every rank
 * writes and then reads its part of one file in /tmp (the page cache: what
 * this measures is the library's path, not a disk).
 *
 *   contiguous  each rank a block of MiB, write_at_all / read_at_all in
 *               1 MiB calls
 *   interleave  a view where rank r owns element r, r + P, r + 2P, ...
 *               (B bytes each); one write_all and one read_all of the
 *               whole part
 *
 * Usage: io_bench [MiB per rank (default 16)] [B list, default "4 64 4096"]
 * Prints one line per case: seconds and MB/s over all ranks (best of 3).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;
static char path[256];

static double best_of(double (*f)(MPI_File, char *, long, int), MPI_File fh, char *buf, long n,
                      int b)
{
    double best = 1e30;
    for (int i = 0; i < 3; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = f(fh, buf, n, b);
        double worst;
        MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (worst < best)
            best = worst;
    }
    return best;
}

static double contig_write(MPI_File fh, char *buf, long n, int b)
{
    (void)b;
    double t = MPI_Wtime();
    for (long at = 0; at < n; at += 1 << 20)
        MPI_File_write_at_all(fh, rank * n + at, buf + at, 1 << 20, MPI_BYTE, MPI_STATUS_IGNORE);
    MPI_File_sync(fh);
    return MPI_Wtime() - t;
}

static double contig_read(MPI_File fh, char *buf, long n, int b)
{
    (void)b;
    double t = MPI_Wtime();
    for (long at = 0; at < n; at += 1 << 20)
        MPI_File_read_at_all(fh, rank * n + at, buf + at, 1 << 20, MPI_BYTE, MPI_STATUS_IGNORE);
    return MPI_Wtime() - t;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long mib = argc > 1 ? atol(argv[1]) : 16;
    long n = mib << 20;
    char *buf = malloc(n);
    for (long i = 0; i < n; i++)
        buf[i] = (char)(i * 7 + rank);
    int pid = (int)getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    snprintf(path, sizeof path, "/tmp/tandem-io-bench-%d", pid);
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(v, &len);
    if (rank == 0)
        printf("# io_bench: %d ranks, %ld MiB per rank; %.60s\n", size, mib, v);

    MPI_File fh;
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                  MPI_INFO_NULL, &fh);
    double w = best_of(contig_write, fh, buf, n, 0);
    double r = best_of(contig_read, fh, buf, n, 0);
    if (rank == 0)
        printf("contiguous  write %8.4f s %9.1f MB/s   read %8.4f s %9.1f MB/s\n", w,
               size * n / w / 1e6, r, size * n / r / 1e6);

    const char *list = argc > 2 ? argv[2] : "4 64 4096";
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
        int b = atoi(tok);
        if (b <= 0)
            continue;
        MPI_Datatype elem, tile;
        MPI_Type_contiguous(b, MPI_BYTE, &elem);
        MPI_Type_commit(&elem);
        MPI_Type_create_resized(elem, 0, (MPI_Aint)b * size, &tile);
        MPI_Type_commit(&tile);
        MPI_File_set_view(fh, (MPI_Offset)rank * b, elem, tile, "native", MPI_INFO_NULL);
        int cnt = (int)(n / b);
        double tw = 1e30, tr = 1e30;
        for (int i = 0; i < 3; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            MPI_File_write_at_all(fh, 0, buf, cnt, elem, MPI_STATUS_IGNORE);
            MPI_File_sync(fh);
            t = MPI_Wtime() - t;
            double worst;
            MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            tw = worst < tw ? worst : tw;
            MPI_Barrier(MPI_COMM_WORLD);
            t = MPI_Wtime();
            MPI_File_read_at_all(fh, 0, buf, cnt, elem, MPI_STATUS_IGNORE);
            t = MPI_Wtime() - t;
            MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            tr = worst < tr ? worst : tr;
        }
        /* Check what came back. */
        int bad = 0;
        for (long i = 0; i < (long)cnt * b; i++)
            bad += buf[i] != (char)(i * 7 + rank);
        int allbad;
        MPI_Allreduce(&bad, &allbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            printf("interleave %5d B  write %8.4f s %9.1f MB/s   read %8.4f s %9.1f MB/s%s\n", b,
                   tw, size * n / tw / 1e6, tr, size * n / tr / 1e6,
                   allbad ? "  WRONG DATA" : "");
        MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
        MPI_Type_free(&tile);
        MPI_Type_free(&elem);
    }
    free(copy);
    MPI_File_close(&fh);
    free(buf);
    MPI_Finalize();
    return 0;
}
