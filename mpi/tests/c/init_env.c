/*
 * init_env.c - initialisation and environment queries.
 *
 * run-sizes: 1 2 3 4   (any n >= 1)
 *
 * Covers: Initialized/Finalized before and after, Init_thread(MULTIPLE) with
 * Query_thread agreeing with `provided`, Is_thread_main, Get_version,
 * Get_library_version, Get_processor_name, Wtime/Wtick, Error_string and
 * Error_class, Alloc_mem/Free_mem, predefined attributes on MPI_COMM_WORLD
 * (TAG_UB, WTIME_IS_GLOBAL, HOST, IO).
 */
#include "common.h"
#include <time.h>

static const char *thread_level_name(int l)
{
    switch (l) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "?";
    }
}

int main(int argc, char **argv)
{
    int flag = -1;

    /* Allowed before MPI_Init. */
    MPI_Initialized(&flag);
    CHECK(flag == 0, "MPI_Initialized before init gave %d", flag);
    flag = -1;
    MPI_Finalized(&flag);
    CHECK(flag == 0, "MPI_Finalized before init gave %d", flag);

    int provided = -1;
    int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    test_setup();
    CHECK(rc == MPI_SUCCESS, "MPI_Init_thread rc %d", rc);
    CHECK(provided == MPI_THREAD_SINGLE || provided == MPI_THREAD_FUNNELED ||
              provided == MPI_THREAD_SERIALIZED || provided == MPI_THREAD_MULTIPLE,
          "provided thread level %d is not a valid level", provided);
    int queried = -1;
    MPI_Query_thread(&queried);
    CHECK(queried == provided, "Query_thread %d != provided %d", queried, provided);
    int is_main = -1;
    MPI_Is_thread_main(&is_main);
    CHECK(is_main != 0, "Is_thread_main false on the main thread");

    flag = -1;
    MPI_Initialized(&flag);
    CHECK(flag != 0, "MPI_Initialized after init gave %d", flag);
    flag = -1;
    MPI_Finalized(&flag);
    CHECK(flag == 0, "MPI_Finalized while running gave %d", flag);

    int rank = -1, size = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 1 && rank >= 0 && rank < size, "rank %d size %d", rank, size);
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == size * (size - 1) / 2, "sum of ranks %d", sum);
    int self_rank = -1, self_size = -1;
    MPI_Comm_rank(MPI_COMM_SELF, &self_rank);
    MPI_Comm_size(MPI_COMM_SELF, &self_size);
    CHECK(self_rank == 0 && self_size == 1, "COMM_SELF rank %d size %d", self_rank,
          self_size);

    /* Version. */
    int ver = -1, subver = -1;
    MPI_Get_version(&ver, &subver);
    CHECK(ver > 3 || (ver == 3 && subver >= 1), "MPI version %d.%d < 3.1", ver, subver);
    CHECK(MPI_VERSION > 3 || (MPI_VERSION == 3 && MPI_SUBVERSION >= 1),
          "header MPI_VERSION %d.%d", MPI_VERSION, MPI_SUBVERSION);

    char libver[MPI_MAX_LIBRARY_VERSION_STRING];
    int libver_len = -1;
    memset(libver, 0, sizeof libver);
    MPI_Get_library_version(libver, &libver_len);
    CHECK(libver_len > 0 && libver_len < MPI_MAX_LIBRARY_VERSION_STRING,
          "library version length %d", libver_len);
    CHECK((int)strlen(libver) == libver_len, "strlen(libver) %zu != resultlen %d",
          strlen(libver), libver_len);

    char pname[MPI_MAX_PROCESSOR_NAME];
    int pname_len = -1;
    memset(pname, 0, sizeof pname);
    MPI_Get_processor_name(pname, &pname_len);
    CHECK(pname_len > 0 && pname_len < MPI_MAX_PROCESSOR_NAME, "processor name len %d",
          pname_len);
    CHECK((int)strlen(pname) == pname_len, "strlen(pname) %zu != len %d", strlen(pname),
          pname_len);

    if (rank == 0) {
        /* Keep just the first line of the library version for the log. */
        char first[128];
        size_t k = 0;
        while (k < sizeof first - 1 && libver[k] && libver[k] != '\n') {
            first[k] = libver[k];
            k++;
        }
        first[k] = 0;
        printf("MPI version %d.%d; thread level %s; processor %s\n", ver, subver,
               thread_level_name(provided), pname);
        printf("library: %s\n", first);
        fflush(stdout);
    }

    /* Wtime / Wtick. */
    double tick = MPI_Wtick();
    CHECK(tick > 0.0 && tick < 1.0, "Wtick %g", tick);
    double prev = MPI_Wtime();
    int monotonic = 1;
    for (int i = 0; i < 10000; i++) {
        double now = MPI_Wtime();
        if (now < prev)
            monotonic = 0;
        prev = now;
    }
    CHECK(monotonic, "MPI_Wtime went backwards");
    double t0 = MPI_Wtime();
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double dt = MPI_Wtime() - t0;
    CHECK(dt >= 0.015 && dt < 5.0, "20 ms sleep measured as %g s", dt);

    /* Error strings / classes. */
    int codes[] = {MPI_SUCCESS, MPI_ERR_RANK, MPI_ERR_TRUNCATE, MPI_ERR_COMM,
                   MPI_ERR_TAG, MPI_ERR_OTHER};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        char s[MPI_MAX_ERROR_STRING];
        int len = -1;
        s[0] = 0;
        rc = MPI_Error_string(codes[i], s, &len);
        CHECK(rc == MPI_SUCCESS, "Error_string(%d) rc %d", codes[i], rc);
        CHECK(len > 0 && len < MPI_MAX_ERROR_STRING, "Error_string(%d) len %d", codes[i],
              len);
        CHECK(s[0] != 0 && (int)strlen(s) == len, "Error_string(%d) = '%s' len %d",
              codes[i], s, len);
        int cls = -1;
        rc = MPI_Error_class(codes[i], &cls);
        CHECK(rc == MPI_SUCCESS && cls == codes[i], "Error_class(%d) = %d rc %d",
              codes[i], cls, rc);
    }
    CHECK(MPI_ERR_LASTCODE > MPI_ERR_RANK, "MPI_ERR_LASTCODE %d", MPI_ERR_LASTCODE);

    /* Alloc_mem / Free_mem. */
    size_t amount = 1 << 20;
    unsigned char *mem = NULL;
    rc = MPI_Alloc_mem((MPI_Aint)amount, MPI_INFO_NULL, &mem);
    CHECK(rc == MPI_SUCCESS && mem != NULL, "Alloc_mem rc %d ptr %p", rc, (void *)mem);
    if (mem) {
        fill_pattern(mem, amount, rank);
        CHECK(check_pattern(mem, amount, rank) < 0, "Alloc_mem memory not writable");
        rc = MPI_Free_mem(mem);
        CHECK(rc == MPI_SUCCESS, "Free_mem rc %d", rc);
    }

    /* Predefined attributes. */
    int *tag_ub = NULL;
    flag = 0;
    rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    CHECK(rc == MPI_SUCCESS && flag, "get_attr TAG_UB rc %d flag %d", rc, flag);
    if (flag && tag_ub)
        CHECK(*tag_ub >= 32767, "TAG_UB %d < 32767", *tag_ub);
    int keys[] = {MPI_WTIME_IS_GLOBAL, MPI_HOST, MPI_IO};
    const char *keynames[] = {"MPI_WTIME_IS_GLOBAL", "MPI_HOST", "MPI_IO"};
    for (int i = 0; i < 3; i++) {
        int *val = NULL;
        flag = -1;
        rc = MPI_Comm_get_attr(MPI_COMM_WORLD, keys[i], &val, &flag);
        CHECK(rc == MPI_SUCCESS, "get_attr %s rc %d", keynames[i], rc);
        CHECK(flag != -1, "get_attr %s flag not set",
              keynames[i]);
        if (rank == 0)
            printf("attr %s: flag %d value %d\n", keynames[i], flag,
                   (flag && val) ? *val : -1);
    }
    if (rank == 0 && tag_ub)
        printf("attr MPI_TAG_UB: %d\n", *tag_ub);

    MPI_Barrier(MPI_COMM_WORLD);

    /* Custom finish so we can check MPI_Finalized after MPI_Finalize. */
    int total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    rc = MPI_Finalize();
    int post_fail = 0;
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "FAIL rank %d: MPI_Finalize rc %d\n", rank, rc);
        post_fail++;
    }
    flag = -1;
    MPI_Finalized(&flag);
    if (flag == 0) {
        fprintf(stderr, "FAIL rank %d: MPI_Finalized false after finalize\n", rank);
        post_fail++;
    }
    flag = -1;
    MPI_Initialized(&flag);
    if (flag == 0) {
        fprintf(stderr, "FAIL rank %d: MPI_Initialized false after finalize\n", rank);
        post_fail++;
    }
    if (rank == 0) {
        if (total + post_fail == 0)
            printf("PASS init_env\n");
        else
            printf("FAIL init_env (%d failures)\n", total + post_fail);
        fflush(stdout);
    }
    return (total + post_fail) == 0 ? 0 : 1;
}
