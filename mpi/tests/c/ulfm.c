/*
 * ulfm.c - surviving a failed process with MPICH's ULFM extensions.
 *
 * run-sizes: 3 4   (the last rank fails; the others survive)
 *
 * Every rank runs allreduce rounds on a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN; after 20 rounds the last rank ends its process
 * abruptly (_exit, no MPI_Finalize), as a crash would. The survivors'
 * next allreduce fails with MPIX_ERR_PROC_FAILED or MPIX_ERR_REVOKED; they
 * revoke, shrink, check the new communicator (size, ranks, correct sums),
 * agree on a flag (MPIX_ERR_PROC_FAILED until the failure is acknowledged,
 * the agreed AND either way), acknowledge, and find the failed rank in
 * MPIX_Comm_failure_get_acked and MPIX_Comm_get_failed. Operations on the
 * revoked communicator fail with MPIX_ERR_REVOKED. A non-blocking
 * agreement (MPIX_Comm_iagree) stays pending while rank 0 is late and the
 * others test it and exchange messages meanwhile, then completes with the
 * AND.
 */
#include "common.h"
#include <dlfcn.h>
#include <unistd.h>

/* MPICH 4.1's MPIX_Comm_get_failed: MPICH 4.0, which this is built
 * against, has none, so it is looked up in the library at run time. */
typedef int (*get_failed_fn)(MPI_Comm, MPI_Group *);
/* MPIX_Comm_iagree: in MPICH's later releases and Open MPI's ULFM, not in
 * MPICH 4.0's header: looked up the same way. */
typedef int (*iagree_fn)(MPI_Comm, int *, MPI_Request *);

static int class_of(int rc)
{
    int c = rc;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    int rank = g_rank, size = g_size, victim = size - 1;
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* Rounds until the failure shows (the victim leaves after 20). */
    int rc = MPI_SUCCESS, round;
    for (round = 0; round < 1000000; round++) {
        if (rank == victim && round == 20) {
            fflush(stdout);
            _exit(0);
        }
        long mine = rank + round, sum = 0;
        rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm);
        if (rc != MPI_SUCCESS)
            break;
        long want = (long)size * (size - 1) / 2 + (long)size * round;
        CHECK(sum == want, "round %d: sum %ld, want %ld", round, sum, want);
    }
    int cls = class_of(rc);
    CHECK(cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_REVOKED,
          "the allreduce failed with class %d", cls);
    CHECK(round >= 19, "failed in round %d, before the victim left", round);
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    printf("rank %d: round %d failed: %s\n", rank, round, msg);

    CHECK(MPIX_Comm_revoke(comm) == MPI_SUCCESS, "revoke");
    long x = 1, y = 0;
    rc = MPI_Allreduce(&x, &y, 1, MPI_LONG, MPI_SUM, comm);
    CHECK(class_of(rc) == MPIX_ERR_REVOKED, "allreduce on a revoked comm: class %d",
          class_of(rc));
    rc = MPI_Send(&x, 1, MPI_LONG, 0, 1, comm);
    CHECK(class_of(rc) == MPIX_ERR_REVOKED, "send on a revoked comm: class %d", class_of(rc));

    MPI_Comm small;
    rc = MPIX_Comm_shrink(comm, &small);
    CHECK(rc == MPI_SUCCESS, "shrink: rc %d", rc);
    MPI_Comm_set_errhandler(small, MPI_ERRORS_RETURN);
    int srank = -1, ssize = -1;
    MPI_Comm_rank(small, &srank);
    MPI_Comm_size(small, &ssize);
    CHECK(ssize == size - 1 && srank == rank, "shrunk: rank %d of %d", srank, ssize);
    for (int r = 0; r < 50; r++) {
        long mine = rank + r, sum = 0;
        rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, small);
        long n = ssize;
        CHECK(rc == MPI_SUCCESS && sum == n * (n - 1) / 2 + n * r,
              "survivors' round %d: rc %d sum %ld", r, rc, sum);
    }

    /* Agreement: the AND of the flags; a failure not acknowledged yet is
     * reported with the agreed value. */
    int flag = rank == 0 ? 0x6 : 0x3;
    rc = MPIX_Comm_agree(comm, &flag);
    CHECK(class_of(rc) == MPIX_ERR_PROC_FAILED, "agree before ack: class %d", class_of(rc));
    CHECK(flag == 0x2, "agreed flag %#x, want 0x2", flag);
    CHECK(MPIX_Comm_failure_ack(comm) == MPI_SUCCESS, "failure_ack");
    flag = rank == 1 ? 0x5 : 0x7;
    rc = MPIX_Comm_agree(comm, &flag);
    CHECK(rc == MPI_SUCCESS && flag == 0x5, "agree after ack: rc %d flag %#x", rc, flag);
    flag = 1;
    rc = MPIX_Comm_agree(small, &flag);
    CHECK(rc == MPI_SUCCESS && flag == 1, "agree on the survivors: rc %d flag %d", rc, flag);

    iagree_fn iagree = (iagree_fn)dlsym(RTLD_DEFAULT, "MPIX_Comm_iagree");
    CHECK(iagree != NULL, "the library has no MPIX_Comm_iagree");
    if (iagree) {
        /* Rank 0 comes half a second late: nobody can finish before. */
        if (rank == 0)
            usleep(500 * 1000);
        int f = rank == 0 ? 0x9 : 0xb, done = 0;
        MPI_Request rq = MPI_REQUEST_NULL;
        rc = iagree(small, &f, &rq);
        CHECK(rc == MPI_SUCCESS && rq != MPI_REQUEST_NULL, "iagree: rc %d", rc);
        if (rank != 0) {
            rc = MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
            CHECK(rc == MPI_SUCCESS && !done, "rank %d: iagree done before rank 0 joined", rank);
        }
        /* Other traffic while it is under way: a ring on the survivors. */
        long to = rank, from = -1;
        rc = MPI_Sendrecv(&to, 1, MPI_LONG, (srank + 1) % ssize, 5, &from, 1, MPI_LONG,
                          (srank + ssize - 1) % ssize, 5, small, MPI_STATUS_IGNORE);
        CHECK(rc == MPI_SUCCESS && from == (srank + ssize - 1) % ssize,
              "ring during iagree: rc %d from %ld", rc, from);
        while (!done && rc == MPI_SUCCESS)
            rc = MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        CHECK(rc == MPI_SUCCESS && f == 0x9, "iagree on the survivors: rc %d flag %#x", rc, f);
        CHECK(rq == MPI_REQUEST_NULL, "a completed iagree request is freed");
        /* On the communicator with the (acknowledged) failure, by wait. */
        f = 0x3;
        rc = iagree(comm, &f, &rq);
        CHECK(rc == MPI_SUCCESS, "iagree on comm: rc %d", rc);
        rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
        CHECK(rc == MPI_SUCCESS && f == 0x3, "iagree on comm: rc %d flag %#x", rc, f);
    }

    MPI_Group acked, failed, world_group;
    MPIX_Comm_failure_get_acked(comm, &acked);
    get_failed_fn get_failed = (get_failed_fn)dlsym(RTLD_DEFAULT, "MPIX_Comm_get_failed");
    CHECK(get_failed != NULL, "the library has no MPIX_Comm_get_failed");
    if (get_failed)
        get_failed(comm, &failed);
    else
        MPIX_Comm_failure_get_acked(comm, &failed);
    MPI_Comm_group(comm, &world_group);
    int n_acked = -1, n_failed = -1, zero = 0, in_world = -1;
    MPI_Group_size(acked, &n_acked);
    MPI_Group_size(failed, &n_failed);
    CHECK(n_acked == 1 && n_failed == 1, "acked %d, failed %d", n_acked, n_failed);
    if (n_acked == 1) {
        MPI_Group_translate_ranks(acked, 1, &zero, world_group, &in_world);
        CHECK(in_world == victim, "the acknowledged failure is rank %d", in_world);
    }
    MPI_Group_free(&acked);
    MPI_Group_free(&failed);
    MPI_Group_free(&world_group);

    /* The verdict, over the survivors. */
    int total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, small);
    if (rank == 0) {
        if (total == 0)
            printf("PASS ulfm\n");
        else
            printf("FAIL ulfm (%d failures)\n", total);
    }
    MPI_Comm_free(&small);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
