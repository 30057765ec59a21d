/*
 * errors.c - error handlers, error codes and error classes.
 *
 * run-sizes: 1 2 3 4   (any n >= 1)
 *
 * Sets MPI_ERRORS_RETURN on MPI_COMM_WORLD (and on MPI_COMM_SELF, where
 * MPI-4 routes errors that have no communicator to blame), checks
 * Comm_get_errhandler, then provokes: invalid rank, tag, communicator
 * (garbage handle and MPI_COMM_NULL), datatype, count, truncation (also
 * seen first by Request_get_status, then collected by Wait), root, op and
 * request.  Every call must return (not abort) a code whose
 * MPI_Error_class is the expected class and for which MPI_Error_string gives
 * text.  Afterwards ordinary traffic must still work.
 */
#include "common.h"

static int rank, size, left, right;

static const char *class_name(int c)
{
    switch (c) {
    case MPI_SUCCESS: return "MPI_SUCCESS";
    case MPI_ERR_BUFFER: return "MPI_ERR_BUFFER";
    case MPI_ERR_COUNT: return "MPI_ERR_COUNT";
    case MPI_ERR_TYPE: return "MPI_ERR_TYPE";
    case MPI_ERR_TAG: return "MPI_ERR_TAG";
    case MPI_ERR_COMM: return "MPI_ERR_COMM";
    case MPI_ERR_RANK: return "MPI_ERR_RANK";
    case MPI_ERR_ROOT: return "MPI_ERR_ROOT";
    case MPI_ERR_OP: return "MPI_ERR_OP";
    case MPI_ERR_ARG: return "MPI_ERR_ARG";
    case MPI_ERR_REQUEST: return "MPI_ERR_REQUEST";
    case MPI_ERR_TRUNCATE: return "MPI_ERR_TRUNCATE";
    case MPI_ERR_OTHER: return "MPI_ERR_OTHER";
    case MPI_ERR_INTERN: return "MPI_ERR_INTERN";
    case MPI_ERR_IN_STATUS: return "MPI_ERR_IN_STATUS";
    default: return "(other)";
    }
}

/* Checks rc is an error of class `want`, and that Error_string describes it. */
static void expect_class(int rc, int want, const char *what, int line)
{
    if (rc == MPI_SUCCESS) {
        CHECK(0, "line %d: %s returned MPI_SUCCESS, expected %s", line, what,
              class_name(want));
        return;
    }
    int cls = -1;
    int erc = MPI_Error_class(rc, &cls);
    CHECK(erc == MPI_SUCCESS, "line %d: Error_class(%d) itself failed (%d)", line, rc, erc);
    CHECK(cls == want, "line %d: %s: class %d (%s), expected %d (%s); code %d", line, what,
          cls, class_name(cls), want, class_name(want), rc);
    char s[MPI_MAX_ERROR_STRING];
    int len = -1;
    s[0] = 0;
    erc = MPI_Error_string(rc, s, &len);
    CHECK(erc == MPI_SUCCESS && len > 0 && s[0] != 0 && len < MPI_MAX_ERROR_STRING,
          "line %d: Error_string(%d) rc %d len %d", line, rc, erc, len);
    if (rank == 0 && getenv("ERRORS_VERBOSE"))
        printf("%-28s code %-10d class %-17s \"%.*s\"\n", what, rc, class_name(cls),
               len > 0 ? len : 0, s);
}
#define EXPECT(rc, cls, what) expect_class((rc), (cls), (what), __LINE__)

static void check_still_works(const char *when)
{
    int v = rank * 10 + 1, w = -1;
    MPI_Request rq;
    MPI_Status st;
    int rc1 = MPI_Irecv(&w, 1, MPI_INT, left, 77, MPI_COMM_WORLD, &rq);
    int rc2 = MPI_Send(&v, 1, MPI_INT, right, 77, MPI_COMM_WORLD);
    int rc3 = MPI_Wait(&rq, &st);
    CHECK(rc1 == MPI_SUCCESS && rc2 == MPI_SUCCESS && rc3 == MPI_SUCCESS,
          "%s: Irecv/Send/Wait rc %d/%d/%d", when, rc1, rc2, rc3);
    CHECK(w == left * 10 + 1 && st.MPI_SOURCE == left && st.MPI_TAG == 77,
          "%s: got %d from %d tag %d", when, w, st.MPI_SOURCE, st.MPI_TAG);
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "%s: Barrier rc %d", when, rc);
    int sum = -1;
    rc = MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS && sum == size * (size - 1) / 2, "%s: Allreduce rc %d sum %d",
          when, rc, sum);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    rank = g_rank;
    size = g_size;
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    /* Default handler on WORLD is MPI_ERRORS_ARE_FATAL. */
    MPI_Errhandler eh = MPI_ERRHANDLER_NULL;
    int rc = MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
    CHECK(rc == MPI_SUCCESS && eh == MPI_ERRORS_ARE_FATAL,
          "default WORLD errhandler is not ERRORS_ARE_FATAL (rc %d)", rc);
    if (eh != MPI_ERRHANDLER_NULL)
        MPI_Errhandler_free(&eh);

    /* A communicator made before the program chose a handler reports
     * MPI_ERRORS_ARE_FATAL, yet its errors go to the handler MPI_COMM_WORLD
     * has when they happen (MPICH's rule, which MPICH's own errors/ tests
     * and programs built for MPICH count on). */
    MPI_Comm early;
    MPI_Comm_dup(MPI_COMM_WORLD, &early);
    eh = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(early, &eh);
    CHECK(eh == MPI_ERRORS_ARE_FATAL, "a duplicate's default handler is not ERRORS_ARE_FATAL");

    rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(rc == MPI_SUCCESS, "Comm_set_errhandler rc %d", rc);
    {
        MPI_Comm none = MPI_COMM_WORLD;
        int err = MPI_Comm_split(early, 0, 0, NULL);
        int cls = -1;
        MPI_Error_class(err, &cls);
        CHECK(cls == MPI_ERR_ARG, "an error on a communicator with the default handler "
              "did not return through MPI_COMM_WORLD's MPI_ERRORS_RETURN: class %d", cls);
        err = MPI_Comm_dup(early, &none);
        CHECK(err == MPI_SUCCESS && none != MPI_COMM_NULL, "dup of the early communicator");
        eh = MPI_ERRHANDLER_NULL;
        MPI_Comm_get_errhandler(none, &eh);
        CHECK(eh == MPI_ERRORS_ARE_FATAL, "the default handler is inherited as the default");
        MPI_Comm_free(&none);
        MPI_Comm_free(&early);
    }
    rc = MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    CHECK(rc == MPI_SUCCESS, "Comm_set_errhandler(SELF) rc %d", rc);
    eh = MPI_ERRHANDLER_NULL;
    rc = MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
    CHECK(rc == MPI_SUCCESS && eh == MPI_ERRORS_RETURN,
          "Comm_get_errhandler did not return MPI_ERRORS_RETURN");
    if (eh != MPI_ERRHANDLER_NULL)
        MPI_Errhandler_free(&eh);

    int buf[16] = {0};
    int big[64];
    for (int i = 0; i < 64; i++)
        big[i] = rank * 100 + i;

    /* Invalid destination rank. */
    rc = MPI_Send(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_RANK, "Send to rank == size");
    rc = MPI_Send(buf, 1, MPI_INT, -5, 0, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_RANK, "Send to rank -5");
    MPI_Request rq = MPI_REQUEST_NULL;
    rc = MPI_Irecv(buf, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, &rq);
    EXPECT(rc, MPI_ERR_RANK, "Irecv from rank size+3");

    /* Invalid tag. */
    rc = MPI_Send(buf, 1, MPI_INT, right, -5, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_TAG, "Send with tag -5");
    rc = MPI_Send(buf, 1, MPI_INT, right, MPI_ANY_TAG, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_TAG, "Send with MPI_ANY_TAG");
    int *tag_ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    if (flag && tag_ub && *tag_ub < 0x7fffffff) {
        rc = MPI_Send(buf, 1, MPI_INT, right, *tag_ub + 1, MPI_COMM_WORLD);
        EXPECT(rc, MPI_ERR_TAG, "Send with tag TAG_UB+1");
    }

    /* Invalid communicators. */
    rc = MPI_Send(buf, 1, MPI_INT, 0, 0, (MPI_Comm)0x12345);
    EXPECT(rc, MPI_ERR_COMM, "Send on (MPI_Comm)0x12345");
    rc = MPI_Send(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL);
    EXPECT(rc, MPI_ERR_COMM, "Send on MPI_COMM_NULL");
    int dummy;
    rc = MPI_Comm_rank(MPI_COMM_NULL, &dummy);
    EXPECT(rc, MPI_ERR_COMM, "Comm_rank(MPI_COMM_NULL)");
    rc = MPI_Barrier(MPI_COMM_NULL);
    EXPECT(rc, MPI_ERR_COMM, "Barrier(MPI_COMM_NULL)");

    /* Invalid datatype. */
    rc = MPI_Send(buf, 1, (MPI_Datatype)0x12345, right, 0, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_TYPE, "Send with (MPI_Datatype)0x12345");
    rc = MPI_Send(buf, 1, MPI_DATATYPE_NULL, right, 0, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_TYPE, "Send with MPI_DATATYPE_NULL");
    /* An uncommitted derived type may not be used for communication. */
    MPI_Datatype unc;
    MPI_Type_contiguous(2, MPI_INT, &unc);
    rc = MPI_Send(buf, 1, unc, right, 0, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_TYPE, "Send with uncommitted type");
    MPI_Type_free(&unc);

    /* Negative count. */
    rc = MPI_Send(buf, -1, MPI_INT, right, 0, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_COUNT, "Send with count -1");
    rc = MPI_Irecv(buf, -3, MPI_INT, left, 0, MPI_COMM_WORLD, &rq);
    EXPECT(rc, MPI_ERR_COUNT, "Irecv with count -3");

    check_still_works("after argument errors");

    /* Truncation: 10 ints into room for 5. */
    {
        MPI_Request sq;
        MPI_Status st;
        int small[5];
        memset(&st, 0, sizeof st);
        st.MPI_SOURCE = -99;
        st.MPI_TAG = -99;
        rc = MPI_Isend(big, 10, MPI_INT, right, 33, MPI_COMM_WORLD, &sq);
        CHECK(rc == MPI_SUCCESS, "Isend for truncation rc %d", rc);
        rc = MPI_Recv(small, 5, MPI_INT, left, 33, MPI_COMM_WORLD, &st);
        EXPECT(rc, MPI_ERR_TRUNCATE, "Recv 10 ints into 5");
        CHECK(st.MPI_SOURCE == left, "truncated recv: status source %d", st.MPI_SOURCE);
        CHECK(st.MPI_TAG == 33, "truncated recv: status tag %d", st.MPI_TAG);
        int ecls = -1;
        if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != 0) {
            MPI_Error_class(st.MPI_ERROR, &ecls);
            CHECK(ecls == MPI_ERR_TRUNCATE, "truncated recv: status.MPI_ERROR class %d",
                  ecls);
        }
        rc = MPI_Wait(&sq, MPI_STATUS_IGNORE);
        CHECK(rc == MPI_SUCCESS, "sender of the truncated message: Wait rc %d", rc);

        /* Nonblocking flavour: the error shows up at Wait. */
        MPI_Request rrq;
        rc = MPI_Irecv(small, 5, MPI_INT, left, 34, MPI_COMM_WORLD, &rrq);
        CHECK(rc == MPI_SUCCESS, "Irecv for truncation rc %d", rc);
        rc = MPI_Send(big, 20, MPI_INT, right, 34, MPI_COMM_WORLD);
        CHECK(rc == MPI_SUCCESS, "Send (truncated at receiver) rc %d", rc);
        memset(&st, 0, sizeof st);
        rc = MPI_Wait(&rrq, &st);
        EXPECT(rc, MPI_ERR_TRUNCATE, "Irecv+Wait 20 ints into 5");
        CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 34, "Irecv truncation: src %d tag %d",
              st.MPI_SOURCE, st.MPI_TAG);

        /* Request_get_status sees the truncation and keeps the request:
         * the Wait that collects it returns the same error. */
        rc = MPI_Irecv(small, 5, MPI_INT, left, 36, MPI_COMM_WORLD, &rrq);
        CHECK(rc == MPI_SUCCESS, "Irecv for get_status rc %d", rc);
        rc = MPI_Send(big, 20, MPI_INT, right, 36, MPI_COMM_WORLD);
        CHECK(rc == MPI_SUCCESS, "Send (truncated, get_status) rc %d", rc);
        int seen = 0;
        for (long spins = 0; !seen && spins < 100000000L; spins++) {
            rc = MPI_Request_get_status(rrq, &seen, MPI_STATUS_IGNORE);
            if (!seen)
                CHECK(rc == MPI_SUCCESS, "Request_get_status (pending) rc %d", rc);
        }
        CHECK(seen, "Request_get_status never saw the truncated receive finish");
        EXPECT(rc, MPI_ERR_TRUNCATE, "Request_get_status of a truncated receive");
        CHECK(rrq != MPI_REQUEST_NULL, "Request_get_status freed the request");
        rc = MPI_Wait(&rrq, MPI_STATUS_IGNORE);
        EXPECT(rc, MPI_ERR_TRUNCATE, "Wait after Request_get_status saw the truncation");

        /* Waitall reports MPI_ERR_IN_STATUS with the truncation in the status. */
        MPI_Request two[2];
        MPI_Status sts[2];
        int small2[2];
        MPI_Irecv(small2, 2, MPI_INT, left, 35, MPI_COMM_WORLD, &two[0]);
        MPI_Isend(big, 8, MPI_INT, right, 35, MPI_COMM_WORLD, &two[1]);
        sts[0].MPI_ERROR = -1;
        sts[1].MPI_ERROR = -1;
        rc = MPI_Waitall(2, two, sts);
        EXPECT(rc, MPI_ERR_IN_STATUS, "Waitall with a truncated receive");
        if (rc != MPI_SUCCESS) {
            MPI_Error_class(sts[0].MPI_ERROR, &ecls);
            CHECK(ecls == MPI_ERR_TRUNCATE, "Waitall: status[0].MPI_ERROR class %d", ecls);
        }
        /* The send in the same Waitall may be complete (MPI_SUCCESS) or, if
         * the implementation stopped early, MPI_ERR_PENDING. */
        if (two[1] != MPI_REQUEST_NULL)
            MPI_Wait(&two[1], MPI_STATUS_IGNORE);
    }
    check_still_works("after truncation");

    /* Invalid root. */
    rc = MPI_Bcast(buf, 1, MPI_INT, size, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_ROOT, "Bcast with root == size");
    rc = MPI_Bcast(buf, 1, MPI_INT, -3, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_ROOT, "Bcast with root -3");
    rc = MPI_Reduce(&rank, &dummy, 1, MPI_INT, MPI_SUM, size + 1, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_ROOT, "Reduce with root size+1");

    /* Invalid op. */
    int out = 0;
    rc = MPI_Allreduce(&rank, &out, 1, MPI_INT, (MPI_Op)0x12345, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_OP, "Allreduce with (MPI_Op)0x12345");
    rc = MPI_Allreduce(&rank, &out, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_OP, "Allreduce with MPI_OP_NULL");
    rc = MPI_Reduce(&rank, &out, 1, MPI_INT, (MPI_Op)0x12345, 0, MPI_COMM_WORLD);
    EXPECT(rc, MPI_ERR_OP, "Reduce with (MPI_Op)0x12345");

    /* Invalid request handle. */
    MPI_Request bad = (MPI_Request)0x12345;
    rc = MPI_Wait(&bad, MPI_STATUS_IGNORE);
    EXPECT(rc, MPI_ERR_REQUEST, "Wait on (MPI_Request)0x12345");
    bad = (MPI_Request)0x12345;
    flag = 0;
    rc = MPI_Test(&bad, &flag, MPI_STATUS_IGNORE);
    EXPECT(rc, MPI_ERR_REQUEST, "Test on (MPI_Request)0x12345");

    check_still_works("after all errors");

    /* Back to fatal on WORLD so finish() behaves normally. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    return finish("errors");
}
