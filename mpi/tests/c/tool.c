/*
 * The MPI tool information interface: MPI_T_init_thread before MPI_Init,
 * every performance variable's description, a session and a handle per
 * readable variable bound to no object, reads, the refusals the standard
 * gives (a bad index or name, writing a read-only variable), categories,
 * control variables' count, and MPI_T_finalize. On tandem also: its
 * counters (tandem_pulled + tandem_streamed) count a rendezvous receive.
 * run-sizes: 1 2
 */
#include "common.h"

static int is_tandem(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    return strstr(v, "tandem") != NULL;
}

static unsigned long long read_named(MPI_T_pvar_session s, const char *name)
{
    int idx = -1, count = 0;
    unsigned long long v = 0;
    MPI_T_pvar_handle h;
    if (MPI_T_pvar_get_index(name, MPI_T_PVAR_CLASS_COUNTER, &idx) != MPI_SUCCESS)
        return ~0ull;
    if (MPI_T_pvar_handle_alloc(s, idx, NULL, &h, &count) != MPI_SUCCESS)
        return ~0ull;
    MPI_T_pvar_read(s, h, &v);
    MPI_T_pvar_handle_free(s, &h);
    return v;
}

int main(int argc, char **argv)
{
    int provided = -1;
    int err = MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Init(&argc, &argv);
    test_setup();
    CHECK(err == MPI_SUCCESS, "MPI_T_init_thread before MPI_Init: %d", err);
    CHECK(provided == MPI_THREAD_SINGLE, "provided %d", provided);

    int ncvar = -1, npvar = -1, ncat = -1;
    CHECK(MPI_T_cvar_get_num(&ncvar) == MPI_SUCCESS && ncvar >= 0, "cvar_get_num %d", ncvar);
    CHECK(MPI_T_pvar_get_num(&npvar) == MPI_SUCCESS && npvar >= 0, "pvar_get_num %d", npvar);
    CHECK(MPI_T_category_get_num(&ncat) == MPI_SUCCESS && ncat >= 0, "category_get_num %d", ncat);

    MPI_T_pvar_session s;
    CHECK_MPI(MPI_T_pvar_session_create(&s));
    int readable = 0;
    for (int i = 0; i < npvar; i++) {
        char name[256], desc[1024];
        int nlen = sizeof name, dlen = sizeof desc, verb, cls, bind, ro, cont, atomic;
        MPI_Datatype dt;
        MPI_T_enum en;
        err = MPI_T_pvar_get_info(i, name, &nlen, &verb, &cls, &dt, &en, desc, &dlen, &bind, &ro,
                                  &cont, &atomic);
        CHECK(err == MPI_SUCCESS, "pvar_get_info(%d): %d", i, err);
        if (err != MPI_SUCCESS)
            continue;
        CHECK(nlen == (int)strlen(name) + 1, "pvar %d: name length %d for \"%s\"", i, nlen, name);
        int back = -1;
        err = MPI_T_pvar_get_index(name, cls, &back);
        CHECK(err == MPI_SUCCESS && back == i, "pvar_get_index(%s) = %d (%d)", name, back, err);
        if (bind != MPI_T_BIND_NO_OBJECT || dt != MPI_UNSIGNED_LONG_LONG || cls != MPI_T_PVAR_CLASS_COUNTER)
            continue;
        MPI_T_pvar_handle h;
        int count = 0;
        err = MPI_T_pvar_handle_alloc(s, i, NULL, &h, &count);
        CHECK(err == MPI_SUCCESS && count == 1, "handle_alloc(%s): %d, count %d", name, err, count);
        if (err != MPI_SUCCESS)
            continue;
        if (!cont)
            MPI_T_pvar_start(s, h);
        unsigned long long v = 0;
        CHECK(MPI_T_pvar_read(s, h, &v) == MPI_SUCCESS, "pvar_read(%s)", name);
        if (ro)
            CHECK(MPI_T_pvar_write(s, h, &v) == MPI_T_ERR_PVAR_NO_WRITE,
                  "writing read-only %s succeeded", name);
        if (!cont)
            MPI_T_pvar_stop(s, h);
        CHECK_MPI(MPI_T_pvar_handle_free(s, &h));
        CHECK(h == MPI_T_PVAR_HANDLE_NULL, "handle_free did not reset the handle");
        readable++;
    }
    int bad = -1;
    err = MPI_T_pvar_get_info(npvar + 1000, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                              NULL, NULL, NULL);
    CHECK(err == MPI_T_ERR_INVALID_INDEX, "pvar_get_info of a bad index: %d", err);
    err = MPI_T_pvar_get_index("no-such-variable-here", MPI_T_PVAR_CLASS_COUNTER, &bad);
    CHECK(err == MPI_T_ERR_INVALID_NAME, "pvar_get_index of a bad name: %d", err);
    err = MPI_T_cvar_get_index("no-such-variable-here", &bad);
    CHECK(err == MPI_T_ERR_INVALID_NAME, "cvar_get_index of a bad name: %d", err);
    for (int c = 0; c < ncat; c++) {
        char name[256];
        int nlen = sizeof name, nc, np, nk;
        CHECK(MPI_T_category_get_info(c, name, &nlen, NULL, NULL, &nc, &np, &nk) == MPI_SUCCESS,
              "category_get_info(%d)", c);
    }

    if (is_tandem()) {
        CHECK(readable == npvar && npvar >= 6, "tandem: %d of %d counters readable", readable, npvar);
        /* A rendezvous receive (1 MiB) moves tandem_pulled or
         * tandem_streamed by one on the receiver. */
        if (g_size >= 2 && g_rank < 2) {
            unsigned long long before = read_named(s, "tandem_pulled") + read_named(s, "tandem_streamed");
            int n = 1 << 18;
            int *buf = calloc(n, sizeof(int));
            if (g_rank == 0)
                MPI_Send(buf, n, MPI_INT, 1, 0, MPI_COMM_WORLD);
            else
                MPI_Recv(buf, n, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            unsigned long long after = read_named(s, "tandem_pulled") + read_named(s, "tandem_streamed");
            if (g_rank == 1)
                CHECK(after == before + 1, "rendezvous counters %llu -> %llu", before, after);
            free(buf);
        }
    }
    CHECK_MPI(MPI_T_pvar_session_free(&s));
    CHECK(s == MPI_T_PVAR_SESSION_NULL, "session_free did not reset the session");
    CHECK_MPI(MPI_T_finalize());
    return finish("tool");
}
