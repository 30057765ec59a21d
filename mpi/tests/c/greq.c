/*
 * greq.c - generalized requests (MPI_Grequest_start, MPI_Grequest_complete):
 * a test before completion says "not done"; MPI_Cancel calls the cancel
 * callback with whether the request is complete; after
 * MPI_Grequest_complete, MPI_Test, MPI_Wait, MPI_Waitall (beside a
 * point-to-point pair) and MPI_Request_get_status return the status the
 * query callback fills, and the free callback runs once, as the request
 * goes; MPI_Request_free before completion frees it at
 * MPI_Grequest_complete; a query callback's error is the completing
 * call's; a null callback is MPI_ERR_ARG; and (tandem) waiting for one
 * never completed is an error, not a hang.
 *
 * run-sizes: 1 2
 */
#include "common.h"

typedef struct {
    int queries, frees, cancels, cancel_complete, query_error;
} ctx_t;

static int query_fn(void *extra, MPI_Status *st)
{
    ctx_t *c = extra;
    c->queries++;
    MPI_Status_set_elements(st, MPI_INT, 5);
    MPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = 3;
    st->MPI_TAG = 7;
    return c->query_error;
}

static int free_fn(void *extra)
{
    ((ctx_t *)extra)->frees++;
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete)
{
    ctx_t *c = extra;
    c->cancels++;
    c->cancel_complete = complete;
    return MPI_SUCCESS;
}

static void check_status(const MPI_Status *st, const char *what)
{
    int n = -1;
    MPI_Get_count(st, MPI_INT, &n);
    CHECK(st->MPI_SOURCE == 3 && st->MPI_TAG == 7 && n == 5, "%s: source %d tag %d count %d",
          what, st->MPI_SOURCE, st->MPI_TAG, n);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();

    /* Test, Cancel, Grequest_complete, Cancel again, Test. */
    {
        ctx_t c = {0};
        MPI_Request r;
        MPI_Status st;
        int flag = -1;
        CHECK_MPI(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &c, &r));
        CHECK_MPI(MPI_Test(&r, &flag, &st));
        CHECK(flag == 0 && c.queries == 0, "Test before completion: flag %d", flag);
        CHECK_MPI(MPI_Cancel(&r));
        CHECK(c.cancels == 1 && c.cancel_complete == 0, "cancel callback: %d calls, complete %d",
              c.cancels, c.cancel_complete);
        CHECK_MPI(MPI_Grequest_complete(r));
        CHECK_MPI(MPI_Cancel(&r));
        CHECK(c.cancels == 2 && c.cancel_complete == 1, "cancel after completion: complete %d",
              c.cancel_complete);
        CHECK(c.frees == 0, "freed before completion was collected");
        CHECK_MPI(MPI_Test(&r, &flag, &st));
        CHECK(flag == 1 && r == MPI_REQUEST_NULL, "Test after completion: flag %d", flag);
        check_status(&st, "Test");
        CHECK(c.queries == 1 && c.frees == 1, "callbacks: %d queries, %d frees", c.queries,
              c.frees);
    }

    /* MPI_Request_get_status, then MPI_Wait. */
    {
        ctx_t c = {0};
        MPI_Request r;
        MPI_Status st;
        int flag = -1;
        CHECK_MPI(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &c, &r));
        CHECK_MPI(MPI_Request_get_status(r, &flag, &st));
        CHECK(flag == 0, "get_status before completion: %d", flag);
        CHECK_MPI(MPI_Grequest_complete(r));
        CHECK_MPI(MPI_Request_get_status(r, &flag, &st));
        CHECK(flag == 1 && r != MPI_REQUEST_NULL, "get_status after completion: %d", flag);
        check_status(&st, "get_status");
        CHECK(c.frees == 0, "get_status freed the request");
        CHECK_MPI(MPI_Wait(&r, &st));
        check_status(&st, "Wait");
        CHECK(r == MPI_REQUEST_NULL && c.frees == 1, "Wait: request %#x, %d frees", (unsigned)r,
              c.frees);
    }

    /* Waitall over a generalized request and a message to self. */
    {
        ctx_t c = {0};
        MPI_Request rs[3];
        MPI_Status sts[3];
        int x = 42, y = 0;
        CHECK_MPI(MPI_Irecv(&y, 1, MPI_INT, g_rank, 9, MPI_COMM_WORLD, &rs[0]));
        CHECK_MPI(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &c, &rs[1]));
        CHECK_MPI(MPI_Isend(&x, 1, MPI_INT, g_rank, 9, MPI_COMM_WORLD, &rs[2]));
        CHECK_MPI(MPI_Grequest_complete(rs[1]));
        CHECK_MPI(MPI_Waitall(3, rs, sts));
        CHECK(y == 42 && sts[0].MPI_SOURCE == g_rank, "Waitall: message %d from %d", y,
              sts[0].MPI_SOURCE);
        check_status(&sts[1], "Waitall");
        CHECK(c.frees == 1, "Waitall: %d frees", c.frees);
    }

    /* MPI_Request_free before completion: freed at MPI_Grequest_complete. */
    {
        ctx_t c = {0};
        MPI_Request r, copy;
        CHECK_MPI(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &c, &r));
        copy = r;
        CHECK_MPI(MPI_Request_free(&r));
        CHECK(r == MPI_REQUEST_NULL, "Request_free left %#x", (unsigned)r);
        /* MPICH 4.0.2 calls free_fn here already. */
        CHECK_STD(c.frees == 0, "Request_free before completion: %d frees", c.frees);
        CHECK_MPI(MPI_Grequest_complete(copy));
        CHECK(c.frees == 1 && c.queries == 0, "after complete: %d frees, %d queries", c.frees,
              c.queries);
    }

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* A null callback: MPI_ERR_ARG, no request. */
    {
        MPI_Request r = MPI_REQUEST_NULL;
        int rc = MPI_Grequest_start(NULL, free_fn, cancel_fn, NULL, &r), cls = -1;
        if (rc != MPI_SUCCESS)
            MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_ARG && r == MPI_REQUEST_NULL, "a null query_fn: rc %d class %d", rc,
              cls);
    }
    /* A query callback's error is the completing call's. */
    {
        ctx_t c = {0};
        c.query_error = MPI_ERR_BUFFER;
        MPI_Request r;
        MPI_Status st;
        CHECK_MPI(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &c, &r));
        CHECK_MPI(MPI_Grequest_complete(r));
        int rc = MPI_Wait(&r, &st), cls = -1;
        if (rc != MPI_SUCCESS)
            MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_BUFFER, "Wait after a failing query: rc %d class %d", rc, cls);
        CHECK(c.frees == 1 && r == MPI_REQUEST_NULL, "failing query: %d frees", c.frees);
    }
    /* Waiting for one nothing can complete: an error at once (MPICH waits
     * for ever: not run there). */
    if (!g_lenient_ref) {
        ctx_t c = {0};
        MPI_Request r;
        CHECK_MPI(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &c, &r));
        int rc = MPI_Wait(&r, MPI_STATUS_IGNORE), cls = -1;
        if (rc != MPI_SUCCESS)
            MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_REQUEST, "Wait on an incomplete generalized request: class %d", cls);
        CHECK_MPI(MPI_Grequest_complete(r));
        CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(c.frees == 1, "then completed: %d frees", c.frees);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    return finish("greq");
}
