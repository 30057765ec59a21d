/* Zero allocations per call in steady state: MPI_Send/MPI_Recv,
 * MPI_Isend+MPI_Wait (and MPI_Irecv+MPI_Wait), a persistent pair and a
 * small MPI_Allreduce, measured with malloc_count.so preloaded (it counts
 * the calling thread's malloc/calloc/realloc calls).
 * run: LD_PRELOAD=.../malloc_count.so mpiexec.hydra -n 2 ./allocs */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

long alloc_count(void) __attribute__((weak));

#define ITERS 2000

static long measure(const char *what, int rank, void (*step)(int), int peer) {
    for (int i = 0; i < 200; i++) step(peer); /* warm up: tables grow */
    long before = alloc_count();
    for (int i = 0; i < ITERS; i++) step(peer);
    long n = alloc_count() - before;
    printf("rank %d: %-24s %ld allocations in %d calls\n", rank, what, n, ITERS);
    return n;
}

static char buf[8], rbuf[8];
static int me;

static void sendrecv(int peer) {
    if (me == 0) {
        MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(rbuf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(rbuf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    }
}

static void isend_wait(int peer) {
    MPI_Request r[2];
    MPI_Status st;
    MPI_Irecv(rbuf, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(buf, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &r[1]);
    MPI_Wait(&r[1], &st);
    MPI_Wait(&r[0], &st);
}

static MPI_Request ps, pr;
static void persistent(int peer) {
    (void)peer;
    MPI_Start(&pr);
    MPI_Start(&ps);
    MPI_Wait(&ps, MPI_STATUS_IGNORE);
    MPI_Wait(&pr, MPI_STATUS_IGNORE);
}

static void allreduce(int peer) {
    (void)peer;
    double x = me, y;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!alloc_count) {
        if (me == 0) printf("FAIL allocs: run with LD_PRELOAD=malloc_count.so\n");
        MPI_Finalize();
        return 1;
    }
    if (size != 2) {
        if (me == 0) printf("FAIL allocs: needs 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    if (me == 0) printf("library: %.60s\n", lib);
    int peer = 1 - me;
    MPI_Send_init(buf, 8, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &ps);
    MPI_Recv_init(rbuf, 8, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &pr);
    long bad = 0;
    bad += measure("MPI_Send/MPI_Recv", me, sendrecv, peer);
    bad += measure("MPI_Isend/Irecv+MPI_Wait", me, isend_wait, peer);
    bad += measure("persistent Start+Wait", me, persistent, peer);
    bad += measure("MPI_Allreduce 8 B", me, allreduce, peer);
    MPI_Request_free(&ps);
    MPI_Request_free(&pr);
    long all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0) printf("%s allocs (%ld allocations in steady state)\n", all ? "FAIL" : "PASS", all);
    MPI_Finalize();
    return all != 0;
}
