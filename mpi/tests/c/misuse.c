/*
 * misuse.c - calls the standard forbids, or that tandem cannot carry out,
 * each refused with an error class (never a crash, never memory written
 * outside the buffers, never a silent truncation).
 *
 * run-sizes: 2 3 4
 *
 * - MPI_IN_PLACE off the root (Reduce, Gather, Scatter) and as the buffer
 *   of a send: MPI_ERR_BUFFER, refused by the one rank that makes the
 *   mistake before any traffic;
 * - a reduction through a derived datatype with holes (a vector) or with
 *   a lower bound (resized): reduced (tandem; coll.c checks the values) or
 *   refused (the reference MPICH 4.0.2 says MPI_ERR_OP); either way
 *   nothing outside the type map written;
 * - a rank's own block longer than its receive block (Scatterv, Alltoallv
 *   on MPI_COMM_SELF): MPI_ERR_TRUNCATE, not a silent cut;
 * - an operator that does not apply to the datatype: MPI_ERR_OP, on the
 *   whole world too, and with a count of 0 as well;
 * - MPI_Reduce_local from or into MPI_IN_PLACE, or of a buffer with
 *   itself: MPI_ERR_BUFFER (it crashed);
 * - MPI_Group_range_incl naming a rank twice: an error;
 * - MPI_Get_count of a type of size 0 for a message of some bytes:
 *   MPI_UNDEFINED;
 * - a null pointer for an argument the call writes or reads (the size of
 *   MPI_Comm_size, a new datatype, group or communicator, the flag of
 *   MPI_Test, MPI_Group_translate_ranks's arrays, which it dereferenced):
 *   MPI_ERR_ARG, with nothing made and the request still active;
 * - an attribute copy callback failing with a code the program added
 *   (MPI_Add_error_code): MPI_Comm_dup fails with that code, its class
 *   and string the program's.
 * Afterwards ordinary collectives still work.
 */
#include "common.h"

static void expect(int rc, int want, const char *what)
{
    int cls = -1;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == want, "%s: rc %d class %d, expected class %d", what, rc,
          cls, want);
}

/* As expect, where the reference MPICH refuses with another class (it
 * says MPI_ERR_OP for a reduction of a vector or resized type). */
static void expect_std(int rc, int want, const char *what)
{
    int cls = -1;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS, "%s: accepted", what);
    CHECK_STD(cls == want, "%s: class %d, expected class %d", what, cls, want);
}

/* An attribute copy callback that fails with the code in `extra`. */
static int refusing_copy(MPI_Comm comm, int key, void *extra, void *in, void *out, int *flag)
{
    (void)comm;
    (void)key;
    (void)in;
    (void)out;
    *flag = 0;
    return *(int *)extra;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, all[64];

    /* MPI_IN_PLACE off the root: only rank 1 makes the mistake. The
     * reference MPICH 4.0.2 crashes in MPI_Reduce here (a SIGSEGV, checked
     * when this test was written), so on it these calls are skipped. */
    if (g_rank == 1 && g_lenient_ref)
        fprintf(stderr, "NOTE rank 1: MPI_IN_PLACE off the root skipped on the reference MPICH\n");
    if (g_rank == 1 && !g_lenient_ref) {
        expect(MPI_Reduce(MPI_IN_PLACE, v, 4, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD),
               MPI_ERR_BUFFER, "Reduce with MPI_IN_PLACE off the root");
        MPI_Request rq = MPI_REQUEST_NULL;
        expect(MPI_Ireduce(MPI_IN_PLACE, v, 4, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &rq),
               MPI_ERR_BUFFER, "Ireduce with MPI_IN_PLACE off the root");
        expect(MPI_Gather(MPI_IN_PLACE, 4, MPI_INT, all, 4, MPI_INT, 0, MPI_COMM_WORLD),
               MPI_ERR_BUFFER, "Gather with MPI_IN_PLACE off the root");
        expect(MPI_Scatter(all, 4, MPI_INT, MPI_IN_PLACE, 4, MPI_INT, 0, MPI_COMM_WORLD),
               MPI_ERR_BUFFER, "Scatter with MPI_IN_PLACE off the root");
        expect(MPI_Send(MPI_IN_PLACE, 4, MPI_INT, 0, 9, MPI_COMM_WORLD), MPI_ERR_BUFFER,
               "Send from MPI_IN_PLACE");
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Reductions through types with holes or a lower bound. */
    MPI_Datatype vec, shifted;
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    MPI_Type_create_resized(MPI_INT, -4, 4, &shifted);
    MPI_Type_commit(&shifted);
    /* Either reduced as the standard says (tandem) or refused (the
     * reference MPICH); in both cases nothing outside the type map
     * written. */
    int r[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    int rc = MPI_Allreduce(v, r, 1, vec, MPI_SUM, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS)
        CHECK(r[0] == g_size * v[0] && r[2] == g_size * v[2], "Allreduce of a vector: %d %d",
              r[0], r[2]);
    else
        expect_std(rc, MPI_ERR_TYPE, "Allreduce of a vector type");
    for (int i = 0; i < 8; i++)
        CHECK(i == 0 || i == 2 || r[i] == -1, "Allreduce of a vector wrote the hole r[%d] = %d",
              i, r[i]);
    int r2[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    rc = MPI_Scan(v + 1, r2 + 1, 2, shifted, MPI_SUM, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS)
        CHECK(r2[1] == (g_rank + 1) * v[1] && r2[2] == (g_rank + 1) * v[2],
              "Scan of a resized type: %d %d", r2[1], r2[2]);
    else
        expect_std(rc, MPI_ERR_TYPE, "Scan of a resized type with a lower bound");
    for (int i = 0; i < 8; i++)
        CHECK(i == 1 || i == 2 || r2[i] == -1, "Scan of a resized type wrote r2[%d] = %d", i,
              r2[i]);
    MPI_Type_free(&vec);
    MPI_Type_free(&shifted);

    /* A rank's own block longer than its receive block (the reference
     * MPICH 4.0.2 aborts on an internal assertion here: skipped on it). */
    if (!g_lenient_ref) {
        int sc[1] = {4}, sd[1] = {0}, rc1[1] = {2}, rd[1] = {0}, small[2];
        expect(MPI_Scatterv(v, sc, sd, MPI_INT, small, 2, MPI_INT, 0, MPI_COMM_SELF),
               MPI_ERR_TRUNCATE, "Scatterv: own block 4 ints into 2");
        expect(MPI_Alltoallv(v, sc, sd, MPI_INT, small, rc1, rd, MPI_INT, MPI_COMM_SELF),
               MPI_ERR_TRUNCATE, "Alltoallv: own block 4 ints into 2");
    }

    /* An operator that does not apply to the type, on the whole world
     * (tandem's own reductions) as elsewhere; and a count of 0 does not
     * skip the checks. */
    {
        float f = 1, g = 0;
        expect(MPI_Allreduce(&f, &g, 1, MPI_FLOAT, MPI_BAND, MPI_COMM_WORLD), MPI_ERR_OP,
               "Allreduce of floats with MPI_BAND");
        expect(MPI_Reduce(&f, &g, 1, MPI_FLOAT, MPI_BOR, 0, MPI_COMM_WORLD), MPI_ERR_OP,
               "Reduce of floats with MPI_BOR");
        int rc0 = MPI_Allreduce(&f, &g, 0, MPI_FLOAT, MPI_OP_NULL, MPI_COMM_WORLD);
        CHECK_STD(rc0 != MPI_SUCCESS, "Allreduce of 0 elements with MPI_OP_NULL accepted");
    }

    /* MPI_Reduce_local with MPI_IN_PLACE or one buffer twice (it read
     * address -1 before: a crash). */
    {
        int a[4] = {1, 2, 3, 4}, b[4] = {0};
        expect(MPI_Reduce_local(MPI_IN_PLACE, b, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER,
               "Reduce_local from MPI_IN_PLACE");
        expect(MPI_Reduce_local(a, MPI_IN_PLACE, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER,
               "Reduce_local into MPI_IN_PLACE");
        expect(MPI_Reduce_local(a, a, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER,
               "Reduce_local of one buffer with itself");
        CHECK(MPI_Reduce_local(a, b, 4, MPI_INT, MPI_SUM) == MPI_SUCCESS && b[3] == 4,
              "Reduce_local still works");
    }

    /* A group naming a rank twice. */
    {
        MPI_Group w, dup = MPI_GROUP_NULL;
        MPI_Comm_group(MPI_COMM_WORLD, &w);
        int ranges[2][3] = {{0, 0, 1}, {0, 0, 1}};
        int rc = MPI_Group_range_incl(w, 2, ranges, &dup);
        CHECK(rc != MPI_SUCCESS, "Group_range_incl accepted rank 0 twice");
        if (rc == MPI_SUCCESS)
            MPI_Group_free(&dup);
        MPI_Group_free(&w);
    }

    /* Get_count of a type of size 0 for a message of 4 bytes. */
    {
        int x = 1, c = -7;
        MPI_Status st;
        MPI_Datatype z;
        MPI_Type_contiguous(0, MPI_INT, &z);
        MPI_Type_commit(&z);
        MPI_Request rq;
        MPI_Isend(&x, 1, MPI_INT, 0, 5, MPI_COMM_SELF, &rq);
        MPI_Probe(0, 5, MPI_COMM_SELF, &st);
        MPI_Get_count(&st, z, &c);
        CHECK(c == MPI_UNDEFINED, "Get_count of a size-0 type for 4 bytes: %d", c);
        int y = 0;
        MPI_Recv(&y, 1, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_STATUS_IGNORE);
        CHECK(y == 1, "received %d", y);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        MPI_Type_free(&z);
    }

    /* Null pointers where the call must write or read. */
    {
        MPI_Group w, g = MPI_GROUP_NULL;
        MPI_Comm_group(MPI_COMM_WORLD, &w);
        int r0 = 0;
        expect(MPI_Comm_size(MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "Comm_size into NULL");
        expect(MPI_Comm_rank(MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "Comm_rank into NULL");
        expect(MPI_Type_contiguous(2, MPI_INT, NULL), MPI_ERR_ARG, "Type_contiguous into NULL");
        expect(MPI_Type_size(MPI_INT, NULL), MPI_ERR_ARG, "Type_size into NULL");
        expect(MPI_Group_size(w, NULL), MPI_ERR_ARG, "Group_size into NULL");
        /* The reference MPICH 4.0.2 crashes (SIGSEGV) in these three. */
        if (!g_lenient_ref) {
            expect(MPI_Group_incl(w, 1, &r0, NULL), MPI_ERR_ARG, "Group_incl into NULL");
            expect(MPI_Group_incl(w, 1, NULL, &g), MPI_ERR_ARG, "Group_incl of a NULL rank list");
            CHECK(g == MPI_GROUP_NULL, "a refused Group_incl made a group");
            expect(MPI_Group_translate_ranks(w, 1, NULL, w, &r0), MPI_ERR_ARG,
                   "Group_translate_ranks from NULL");
        } else if (g_rank == 0) {
            fprintf(stderr, "NOTE: Group_incl and Group_translate_ranks from NULL skipped on the reference MPICH\n");
        }
        expect(MPI_Group_translate_ranks(w, 1, &r0, w, NULL), MPI_ERR_ARG,
               "Group_translate_ranks into NULL");
        /* MPI_COMM_SELF's handler returns; split is collective over it. */
        expect(MPI_Comm_split(MPI_COMM_SELF, 0, 0, NULL), MPI_ERR_ARG, "Comm_split into NULL");
        int x = 7, y = 0, c = -1;
        MPI_Request rq;
        MPI_Status st;
        MPI_Irecv(&y, 1, MPI_INT, 0, 9, MPI_COMM_SELF, &rq);
        expect(MPI_Test(&rq, NULL, &st), MPI_ERR_ARG, "Test into a NULL flag");
        CHECK(rq != MPI_REQUEST_NULL, "a refused Test freed the request");
        CHECK_MPI(MPI_Send(&x, 1, MPI_INT, 0, 9, MPI_COMM_SELF));
        expect(MPI_Iprobe(0, 9, MPI_COMM_SELF, NULL, &st), MPI_ERR_ARG, "Iprobe into NULL");
        CHECK_MPI(MPI_Wait(&rq, &st));
        CHECK(y == 7, "received %d after the refused Test", y);
        expect(MPI_Get_count(&st, MPI_INT, NULL), MPI_ERR_ARG, "Get_count into NULL");
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &c));
        CHECK(c == 1, "Get_count %d", c);
        MPI_Group_free(&w);
    }

    /* A copy callback failing with the program's own error code. */
    {
        int cls, code, key, val = 1, k, len;
        char msg[MPI_MAX_ERROR_STRING];
        MPI_Add_error_class(&cls);
        MPI_Add_error_code(cls, &code);
        MPI_Add_error_string(code, "misuse: the copy callback refused");
        MPI_Comm_create_keyval(refusing_copy, MPI_COMM_NULL_DELETE_FN, &key, &code);
        MPI_Comm d, d2 = MPI_COMM_NULL;
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        MPI_Comm_set_attr(d, key, &val);
        int rc = MPI_Comm_dup(d, &d2);
        MPI_Error_class(rc, &k);
        CHECK(rc == code && k == cls, "Comm_dup with a refusing copy callback: rc %d class %d, "
              "expected code %d class %d", rc, k, code, cls);
        MPI_Error_string(rc, msg, &len);
        CHECK(strcmp(msg, "misuse: the copy callback refused") == 0, "its string: %s", msg);
        if (d2 != MPI_COMM_NULL)
            MPI_Comm_free(&d2);
        MPI_Comm_free(&d);
        MPI_Comm_free_keyval(&key);
    }

    /* Still works. */
    int one = 1, sum = 0;
    CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == g_size, "Allreduce after the misuse: %d", sum);
    return finish("misuse");
}
