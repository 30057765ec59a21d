/*
 * MPI-IO: open/close/delete, explicit offsets, individual and shared file
 * pointers, ordered and split collective calls, non-blocking calls, file
 * views (an interleaved vector filetype, a displacement), a
 * non-contiguous memory datatype, seeks, sizes, atomic mode, the file
 * error handlers, and the errors (missing file, exclusive create of an
 * existing one, bad modes, writes to a read-only file, an unknown data
 * representation, reads past the end); MPI_Status_c2f/f2c.
 * run-sizes: 1 2 3 4
 */
#include "common.h"
#include <unistd.h>

static int rank, size;
static char path[256];

static int cls(int err)
{
    int c = -1;
    MPI_Error_class(err, &c);
    return c;
}

/* A file name every rank agrees on (rank 0's pid). */
static void make_path(const char *what)
{
    int pid = (int)getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    snprintf(path, sizeof path, "/tmp/tandem-io-%d-%s", pid, what);
}

static void test_explicit_offsets(void)
{
    make_path("explicit");
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    CHECK(fh != MPI_FILE_NULL, "open gave MPI_FILE_NULL");
    enum { N = 1000 };
    int buf[N];
    for (int i = 0; i < N; i++)
        buf[i] = rank * N + i;
    MPI_Status st;
    CHECK_MPI(MPI_File_write_at(fh, (MPI_Offset)rank * N * sizeof(int), buf, N, MPI_INT, &st));
    int n = -1;
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == N, "write_at count %d", n);
    /* The status in Fortran's form and back. */
    MPI_Fint fst[5]; /* MPICH's MPI_F_STATUS_SIZE */
    MPI_Status st2;
    CHECK_MPI(MPI_Status_c2f(&st, fst));
    CHECK_MPI(MPI_Status_f2c(fst, &st2));
    n = -1;
    MPI_Get_count(&st2, MPI_INT, &n);
    CHECK(n == N, "status through MPI_Status_c2f/f2c: count %d", n);
    CHECK_MPI(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_sync(fh));
    MPI_Offset sz = -1;
    CHECK_MPI(MPI_File_get_size(fh, &sz));
    CHECK(sz == (MPI_Offset)size * N * sizeof(int), "size %lld", (long long)sz);
    MPI_Barrier(MPI_COMM_WORLD); /* every rank looked before the file grows */
    /* Read the next rank's block. */
    int other = (rank + 1) % size, got[N];
    memset(got, 0, sizeof got);
    CHECK_MPI(MPI_File_read_at_all(fh, (MPI_Offset)other * N * sizeof(int), got, N, MPI_INT, &st));
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == N, "read_at_all count %d", n);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += got[i] != other * N + i;
    CHECK(bad == 0, "read_at_all: %d wrong values", bad);
    /* A read past the end: short, and counted. */
    CHECK_MPI(MPI_File_read_at(fh, sz - 2 * sizeof(int), got, 10, MPI_INT, &st));
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == 2, "read at the end: count %d, not 2", n);
    CHECK_MPI(MPI_File_read_at(fh, sz + 100, got, 10, MPI_INT, &st));
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == 0, "read past the end: count %d", n);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Non-blocking forms complete through MPI_Wait. */
    MPI_Request rq;
    int one = 4242 + rank;
    MPI_Offset tail = sz + (MPI_Offset)rank * sizeof(int);
    CHECK_MPI(MPI_File_iwrite_at(fh, tail, &one, 1, MPI_INT, &rq));
    CHECK_MPI(MPI_Wait(&rq, &st));
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == 1, "iwrite_at count %d", n);
    int back = 0;
    CHECK_MPI(MPI_File_iread_at(fh, tail, &back, 1, MPI_INT, &rq));
    CHECK_MPI(MPI_Wait(&rq, &st));
    CHECK(back == 4242 + rank, "iread_at read %d", back);
    /* Sizes: set_size truncates, preallocate only grows. */
    CHECK_MPI(MPI_File_set_size(fh, 100));
    CHECK_MPI(MPI_File_get_size(fh, &sz));
    CHECK(sz == 100, "after set_size: %lld", (long long)sz);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_preallocate(fh, 4096));
    CHECK_MPI(MPI_File_get_size(fh, &sz));
    CHECK(sz == 4096, "after preallocate: %lld", (long long)sz);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_preallocate(fh, 10));
    CHECK_MPI(MPI_File_get_size(fh, &sz));
    CHECK(sz == 4096, "preallocate shrank the file: %lld", (long long)sz);
    /* Queries. */
    int amode = 0;
    CHECK_MPI(MPI_File_get_amode(fh, &amode));
    CHECK(amode == (MPI_MODE_CREATE | MPI_MODE_RDWR), "amode %d", amode);
    MPI_Group g, wg;
    int res = -1;
    CHECK_MPI(MPI_File_get_group(fh, &g));
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_compare(g, wg, &res);
    CHECK(res == MPI_IDENT, "file group differs from the world's: %d", res);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    MPI_Info info;
    CHECK_MPI(MPI_File_get_info(fh, &info));
    CHECK(info != MPI_INFO_NULL, "get_info gave MPI_INFO_NULL");
    MPI_Info_free(&info);
    MPI_Fint f = MPI_File_c2f(fh);
    CHECK(MPI_File_f2c(f) == fh, "c2f/f2c do not round-trip");
    CHECK_MPI(MPI_File_close(&fh));
    CHECK(fh == MPI_FILE_NULL, "close did not reset the handle");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK_MPI(MPI_File_delete(path, MPI_INFO_NULL));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(access(path, F_OK) != 0, "the file is still there after MPI_File_delete");
}

static void test_views_and_pointers(void)
{
    make_path("view");
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path,
                            MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                            MPI_INFO_NULL, &fh));
    /* Interleaved: rank r owns ints r, r + size, r + 2 size, ... after a
     * 16-byte header. */
    enum { N = 257 };
    MPI_Datatype ft, strided;
    MPI_Type_create_resized(MPI_INT, 0, size * sizeof(int), &strided);
    MPI_Type_contiguous(1, strided, &ft);
    MPI_Type_commit(&ft);
    CHECK_MPI(MPI_File_set_view(fh, 16 + rank * sizeof(int), MPI_INT, ft, "native", MPI_INFO_NULL));
    MPI_Type_free(&ft); /* the view keeps it */
    int buf[N];
    for (int i = 0; i < N; i++)
        buf[i] = i * size + rank;
    MPI_Status st;
    /* Two writes through the individual pointer. */
    CHECK_MPI(MPI_File_write_all(fh, buf, 100, MPI_INT, &st));
    CHECK_MPI(MPI_File_write(fh, buf + 100, N - 100, MPI_INT, &st));
    MPI_Offset pos = -1;
    CHECK_MPI(MPI_File_get_position(fh, &pos));
    CHECK(pos == N, "position %lld after %d ints", (long long)pos, N);
    MPI_Offset byte = -1;
    CHECK_MPI(MPI_File_get_byte_offset(fh, 3, &byte));
    CHECK(byte == 16 + (MPI_Offset)(3 * size + rank) * sizeof(int), "byte offset %lld",
          (long long)byte);
    CHECK_MPI(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_sync(fh));
    /* Everything through a plain view: 0, 1, 2, ... */
    CHECK_MPI(MPI_File_set_view(fh, 16, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    int *all = malloc(sizeof(int) * N * size);
    CHECK_MPI(MPI_File_read_all(fh, all, N * size, MPI_INT, &st));
    int n = -1, bad = 0;
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == N * size, "read %d ints", n);
    for (int i = 0; i < N * size; i++)
        bad += all[i] != i;
    CHECK(bad == 0, "interleaved view: %d wrong values", bad);
    /* Seeks. */
    CHECK_MPI(MPI_File_seek(fh, 5, MPI_SEEK_SET));
    CHECK_MPI(MPI_File_seek(fh, 2, MPI_SEEK_CUR));
    int v = -1;
    CHECK_MPI(MPI_File_read(fh, &v, 1, MPI_INT, &st));
    CHECK(v == 7, "after seeks read %d, not 7", v);
    CHECK_MPI(MPI_File_seek(fh, -1, MPI_SEEK_END));
    CHECK_MPI(MPI_File_read(fh, &v, 1, MPI_INT, &st));
    CHECK(v == N * size - 1, "at the end read %d", v);
    CHECK(MPI_File_seek(fh, -1, MPI_SEEK_SET) != MPI_SUCCESS, "a negative seek succeeded");
    /* A non-contiguous memory type: every other int of a buffer. */
    MPI_Datatype every2;
    MPI_Type_vector(4, 1, 2, MPI_INT, &every2);
    MPI_Type_commit(&every2);
    int sparse[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    CHECK_MPI(MPI_File_read_at(fh, 10, sparse, 1, every2, &st));
    CHECK(sparse[0] == 10 && sparse[2] == 11 && sparse[4] == 12 && sparse[6] == 13 &&
              sparse[1] == -1 && sparse[7] == -1,
          "non-contiguous read: %d %d %d %d / %d", sparse[0], sparse[2], sparse[4], sparse[6],
          sparse[1]);
    /* The view as given back. */
    MPI_Offset disp;
    MPI_Datatype et, ftype;
    char rep[MPI_MAX_DATAREP_STRING];
    CHECK_MPI(MPI_File_get_view(fh, &disp, &et, &ftype, rep));
    CHECK(disp == 16 && et == MPI_INT && ftype == MPI_INT && strcmp(rep, "native") == 0,
          "get_view: %lld %s", (long long)disp, rep);
    MPI_Type_free(&every2);
    free(all);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(access(path, F_OK) != 0, "MPI_MODE_DELETE_ON_CLOSE left the file");
}

static void test_shared_and_ordered(void)
{
    make_path("shared");
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path,
                            MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    MPI_Status st;
    /* Ordered: rank r writes r + 1 ints of value r, in rank order. */
    int mine[8];
    for (int i = 0; i < 8; i++)
        mine[i] = rank;
    CHECK_MPI(MPI_File_write_ordered(fh, mine, rank + 1, MPI_INT, &st));
    MPI_Offset sp = -1;
    CHECK_MPI(MPI_File_get_position_shared(fh, &sp));
    CHECK(sp == size * (size + 1) / 2, "shared position %lld after write_ordered", (long long)sp);
    MPI_Barrier(MPI_COMM_WORLD); /* all have looked before anyone moves it */
    /* Each rank appends one int through the shared pointer. */
    int v = 1000 + rank;
    CHECK_MPI(MPI_File_write_shared(fh, &v, 1, MPI_INT, &st));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    int got[8] = {0};
    CHECK_MPI(MPI_File_read_ordered(fh, got, rank + 1, MPI_INT, &st));
    int bad = 0;
    for (int i = 0; i <= rank; i++)
        bad += got[i] != rank;
    CHECK(bad == 0, "read_ordered: %d wrong values (first %d)", bad, got[0]);
    /* The appended ints, each exactly once. */
    int total = size * (size + 1) / 2;
    int *tail = malloc(sizeof(int) * size);
    CHECK_MPI(MPI_File_read_at(fh, total, tail, size, MPI_INT, &st));
    int seen = 0;
    for (int i = 0; i < size; i++)
        if (tail[i] >= 1000 && tail[i] < 1000 + size)
            seen |= 1 << (tail[i] - 1000);
    CHECK(seen == (1 << size) - 1, "write_shared: appended set %#x", seen);
    free(tail);
    /* Split collectives. */
    int w = 77 + rank, r = 0;
    CHECK_MPI(MPI_File_write_at_all_begin(fh, 100 + rank, &w, 1, MPI_INT));
    CHECK_MPI(MPI_File_write_at_all_end(fh, &w, &st));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_read_at_all_begin(fh, 100 + (rank + 1) % size, &r, 1, MPI_INT));
    CHECK_MPI(MPI_File_read_at_all_end(fh, &r, &st));
    CHECK(r == 77 + (rank + 1) % size, "split collective read %d", r);
    CHECK(MPI_File_read_all_end(fh, &r, &st) != MPI_SUCCESS, "an _end without its _begin succeeded");
    /* Atomic mode. */
    int flag = 0;
    CHECK_MPI(MPI_File_set_atomicity(fh, 1));
    CHECK_MPI(MPI_File_get_atomicity(fh, &flag));
    CHECK(flag == 1, "atomicity %d", flag);
    CHECK_MPI(MPI_File_write_at(fh, 200 + rank, &w, 1, MPI_INT, &st));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_read_at(fh, 200 + rank, &r, 1, MPI_INT, &st));
    CHECK(r == w, "atomic mode read %d", r);
    CHECK_MPI(MPI_File_close(&fh));
}

static int handler_calls = 0;
static MPI_File handler_file;
static void on_error(MPI_File *fh, int *code, ...)
{
    handler_calls++;
    handler_file = *fh;
    (void)code;
}

static int extent_fn(MPI_Datatype dt, MPI_Aint *extent, void *state)
{
    MPI_Aint lb;
    (void)state;
    return MPI_Type_get_extent(dt, &lb, extent);
}

/* Handlers that clear the error: the call then returns what they left
 * (MPI_SUCCESS), as MPICH returns it. */
static int clearing_calls = 0;
static void clear_file_error(MPI_File *fh, int *code, ...)
{
    (void)fh;
    clearing_calls++;
    *code = MPI_SUCCESS;
}
static void clear_comm_error(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    clearing_calls++;
    *code = MPI_SUCCESS;
}

static void test_errors(void)
{
    MPI_File fh = MPI_FILE_NULL;
    MPI_Errhandler eh;
    /* Files return errors by default. */
    CHECK_MPI(MPI_File_get_errhandler(MPI_FILE_NULL, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "MPI_FILE_NULL's handler is not MPI_ERRORS_RETURN");
    make_path("missing");
    int err = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    CHECK(cls(err) == MPI_ERR_NO_SUCH_FILE, "open of a missing file: class %d", cls(err));
    CHECK(fh == MPI_FILE_NULL, "failed open left a handle");
    err = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_CREATE, MPI_INFO_NULL, &fh);
    CHECK(cls(err) == MPI_ERR_AMODE, "RDONLY|CREATE: class %d", cls(err));
    err = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    CHECK(cls(err) == MPI_ERR_AMODE, "RDWR|WRONLY: class %d", cls(err));
    err = MPI_File_delete(path, MPI_INFO_NULL);
    CHECK(cls(err) == MPI_ERR_NO_SUCH_FILE, "delete of a missing file: class %d", cls(err));

    make_path("errors");
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                            MPI_INFO_NULL, &fh));
    int x = 5;
    CHECK_MPI(MPI_File_write_at(fh, rank * sizeof(int), &x, 1, MPI_INT, MPI_STATUS_IGNORE));
    err = MPI_File_read_at(fh, 0, &x, 1, MPI_INT, MPI_STATUS_IGNORE);
    CHECK(cls(err) == MPI_ERR_ACCESS, "read of a WRONLY file: class %d", cls(err));
    err = MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "external32x", MPI_INFO_NULL);
    CHECK(cls(err) == MPI_ERR_UNSUPPORTED_DATAREP, "unknown datarep: class %d", cls(err));
    /* A handler of the program's, called with the file. */
    CHECK_MPI(MPI_File_create_errhandler(on_error, &eh));
    CHECK_MPI(MPI_File_set_errhandler(fh, eh));
    err = MPI_File_read_at(fh, 0, &x, 1, MPI_INT, MPI_STATUS_IGNORE);
    CHECK(err != MPI_SUCCESS && handler_calls == 1 && handler_file == fh,
          "program's handler: %d calls", handler_calls);
    CHECK_MPI(MPI_File_call_errhandler(fh, MPI_ERR_OTHER));
    CHECK(handler_calls == 2, "MPI_File_call_errhandler: %d calls", handler_calls);
    CHECK_MPI(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN));
    MPI_Errhandler_free(&eh);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    /* Exclusive creation of a file that exists. */
    err = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR,
                        MPI_INFO_NULL, &fh);
    CHECK(cls(err) == MPI_ERR_FILE_EXISTS, "EXCL on an existing file: class %d", cls(err));
    /* Read-only. */
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    err = MPI_File_write_at(fh, 0, &x, 1, MPI_INT, MPI_STATUS_IGNORE);
    CHECK(cls(err) == MPI_ERR_READ_ONLY, "write to a RDONLY file: class %d", cls(err));
    CHECK_MPI(MPI_File_read_at(fh, 0, &x, 1, MPI_INT, MPI_STATUS_IGNORE));
    CHECK(x == 5, "read back %d", x);
    CHECK_MPI(MPI_File_close(&fh));
    /* A registered representation without conversion functions is native
     * data; registering a name twice fails. */
    err = MPI_Register_datarep("tandem-test-rep", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL,
                               extent_fn, NULL);
    CHECK(err == MPI_SUCCESS, "MPI_Register_datarep: class %d", cls(err));
    err = MPI_Register_datarep("tandem-test-rep", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL,
                               extent_fn, NULL);
    CHECK(cls(err) == MPI_ERR_DUP_DATAREP, "a second MPI_Register_datarep: class %d", cls(err));
    err = MPI_Register_datarep("native", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL,
                               extent_fn, NULL);
    CHECK_STD(cls(err) == MPI_ERR_DUP_DATAREP, "registering native: class %d", cls(err));
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    err = MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "tandem-test-rep", MPI_INFO_NULL);
    CHECK_STD(err == MPI_SUCCESS, "set_view with a registered representation: class %d", cls(err));
    x = 0;
    if (err == MPI_SUCCESS) {
        CHECK_MPI(MPI_File_read_at(fh, 0, &x, 1, MPI_INT, MPI_STATUS_IGNORE));
        CHECK(x == 5, "read back %d through the registered representation", x);
    }
    CHECK_MPI(MPI_File_close(&fh));
    /* An invalid handle goes to MPI_FILE_NULL's handler (returns). */
    MPI_File bogus = MPI_File_f2c(12345);
    err = MPI_File_get_size(bogus, &(MPI_Offset){0});
    CHECK(cls(err) == MPI_ERR_FILE, "invalid file handle: class %d", cls(err));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK_MPI(MPI_File_delete(path, MPI_INFO_NULL));
    /* A handler that clears the code: the call returns MPI_SUCCESS. */
    MPI_Errhandler clear;
    CHECK_MPI(MPI_File_create_errhandler(clear_file_error, &clear));
    CHECK_MPI(MPI_File_set_errhandler(MPI_FILE_NULL, clear));
    make_path("missing-again");
    err = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    CHECK(err == MPI_SUCCESS && clearing_calls == 1, "a clearing file handler: rc %d, %d calls",
          err, clearing_calls);
    CHECK_MPI(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    MPI_Errhandler_free(&clear);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK_MPI(MPI_Comm_create_errhandler(clear_comm_error, &clear));
    CHECK_MPI(MPI_Comm_set_errhandler(dup, clear));
    err = MPI_Send(&x, 1, MPI_INT, size + 5, 0, dup);
    CHECK(err == MPI_SUCCESS && clearing_calls == 2, "a clearing comm handler: rc %d, %d calls",
          err, clearing_calls);
    MPI_Errhandler_free(&clear);
    MPI_Comm_free(&dup);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    rank = g_rank;
    size = g_size;
    test_explicit_offsets();
    test_views_and_pointers();
    test_shared_and_ordered();
    test_errors();
    return finish("io");
}
