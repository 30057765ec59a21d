/*
 * coll.c - collective operations on MPI_COMM_WORLD.
 *
 * run-sizes: 1 2 3 4   (any n >= 1)
 *
 * Covers: Barrier; Bcast (every root, 1 B .. 1 MiB); Reduce/Allreduce with
 * all ten arithmetic/logical/bitwise ops on INT, SHORT, UNSIGNED_LONG,
 * LONG_LONG, arithmetic ops on DOUBLE/FLOAT, SUM on CHAR, logical ops on
 * C_BOOL; SUM, MAXLOC and PROD on the long double types; MPI_IN_PLACE for Allreduce, Reduce (root), Allgather, Gather,
 * Scatter, Reduce_scatter_block; MINLOC/MAXLOC on all pair types (ties go to
 * the lower index); Allgather(v), Alltoall(v), Gather(v), Scatter(v),
 * Reduce_scatter(_block), Scan, Exscan, Reduce_local; Ibarrier, Ibcast,
 * Iallreduce completed by Wait and by a Test loop; Iallgather, Ialltoall and
 * Ireduce (also in place at the root) that return before the other ranks join (rank 0 starts them, then sends
 * what the others wait for before they start theirs), into a contiguous
 * and into a vector receive type, and in place; user ops (commutative and
 * a non-commutative 2x2 integer matrix product on a contiguous type, which
 * must follow rank order), Op_free; Allreduce of 1M doubles.
 */
#include "common.h"
#include <stdbool.h>
#include <complex.h>

static int rank, size;

/* ------------------------------------------------------------------ */
/* Predefined reductions                                               */
/* ------------------------------------------------------------------ */

enum { OSUM, OPROD, OMIN, OMAX, OLAND, OLOR, OLXOR, OBAND, OBOR, OBXOR, NOPS };
static const char *op_names[NOPS] = {"SUM", "PROD", "MIN",  "MAX", "LAND",
                                     "LOR", "LXOR", "BAND", "BOR", "BXOR"};
static MPI_Op op_handle(int o)
{
    switch (o) {
    case OSUM: return MPI_SUM;
    case OPROD: return MPI_PROD;
    case OMIN: return MPI_MIN;
    case OMAX: return MPI_MAX;
    case OLAND: return MPI_LAND;
    case OLOR: return MPI_LOR;
    case OLXOR: return MPI_LXOR;
    case OBAND: return MPI_BAND;
    case OBOR: return MPI_BOR;
    default: return MPI_BXOR;
    }
}

/* Input value of element i on rank r for op o. Small, so that products of
 * up to 4 values fit even in a short and floating-point results are exact. */
static long long genval(int o, int r, int i, int is_signed)
{
    if (o <= OMAX) {
        long long v = (r * 7 + i * 3) % 11;
        return is_signed ? v - 3 : v + 1;
    }
    if (o <= OLXOR) /* bit r of i decides truth; i = 15 is true everywhere */
        return ((i >> (r % 8)) & 1) ? 2 : 0;
    return ((r * 0x35) ^ (i * 0x1B)) & 0x7F;
}

#define NELEM 37

#define APPLY_INT(T, o, a, b)                                                  \
    ((o) == OSUM    ? (T)((a) + (b))                                           \
     : (o) == OPROD ? (T)((a) * (b))                                           \
     : (o) == OMIN  ? ((a) < (b) ? (a) : (b))                                  \
     : (o) == OMAX  ? ((a) > (b) ? (a) : (b))                                  \
     : (o) == OLAND ? (T)(((a) != 0) && ((b) != 0))                            \
     : (o) == OLOR  ? (T)(((a) != 0) || ((b) != 0))                            \
     : (o) == OLXOR ? (T)(((a) != 0) != ((b) != 0))                            \
     : (o) == OBAND ? (T)((a) & (b))                                           \
     : (o) == OBOR  ? (T)((a) | (b))                                           \
                    : (T)((a) ^ (b)))

#define APPLY_FLT(T, o, a, b)                                                  \
    ((o) == OSUM    ? (T)((a) + (b))                                           \
     : (o) == OPROD ? (T)((a) * (b))                                           \
     : (o) == OMIN  ? ((a) < (b) ? (a) : (b))                                  \
                    : ((a) > (b) ? (a) : (b)))

/* Runs Allreduce, Reduce (rotating root) and in-place variants for every op
 * in [ofirst, olast] and compares against a locally computed result. */
#define DEF_RED_TEST(T, NAME, MPIT, SIGNED, HALF, APPLY, ofirst, olast, FMT, CAST) \
    static int arr_eq_##NAME(const T *a, const T *b)                           \
    {                                                                          \
        for (int i = 0; i < NELEM; i++)                                        \
            if (a[i] != b[i])                                                  \
                return 0;                                                      \
        return 1;                                                              \
    }                                                                          \
    static void test_red_##NAME(void)                                          \
    {                                                                          \
        for (int o = (ofirst); o <= (olast); o++) {                            \
            T in[NELEM], out[NELEM], exp[NELEM], tmp[NELEM];                   \
            for (int i = 0; i < NELEM; i++) {                                  \
                in[i] = (T)genval(o, rank, i, SIGNED);                         \
                if (o <= OMAX)                                                 \
                    in[i] = (T)(in[i] + (HALF) * ((rank + i) % 2));            \
                T acc = 0;                                                     \
                for (int r = 0; r < size; r++) {                               \
                    T x = (T)genval(o, r, i, SIGNED);                          \
                    if (o <= OMAX)                                             \
                        x = (T)(x + (HALF) * ((r + i) % 2));                   \
                    acc = r == 0 ? x : APPLY(T, o, acc, x);                    \
                }                                                              \
                exp[i] = acc;                                                  \
            }                                                                  \
            MPI_Op op = op_handle(o);                                          \
            memset(out, 0x5A, sizeof out);                                     \
            MPI_Allreduce(in, out, NELEM, MPIT, op, MPI_COMM_WORLD);           \
            int bad = -1;                                                      \
            for (int i = 0; i < NELEM; i++)                                    \
                if (out[i] != exp[i]) {                                        \
                    bad = i;                                                   \
                    break;                                                     \
                }                                                              \
            CHECK(bad < 0, "Allreduce %s %s: element %d got " FMT              \
                  " expected " FMT, #MPIT, op_names[o], bad,                   \
                  CAST(out[bad < 0 ? 0 : bad]), CAST(exp[bad < 0 ? 0 : bad])); \
            /* in place */                                                     \
            memcpy(tmp, in, sizeof in);                                        \
            MPI_Allreduce(MPI_IN_PLACE, tmp, NELEM, MPIT, op, MPI_COMM_WORLD); \
            CHECK(arr_eq_##NAME(tmp, exp) || bad >= 0,              \
                  "Allreduce(IN_PLACE) %s %s", #MPIT, op_names[o]);            \
            /* Reduce to a rotating root, normal and in place */               \
            int root = o % size;                                               \
            memset(out, 0x5A, sizeof out);                                     \
            MPI_Reduce(in, out, NELEM, MPIT, op, root, MPI_COMM_WORLD);        \
            if (rank == root)                                                  \
                CHECK(arr_eq_##NAME(out, exp) || bad >= 0,          \
                      "Reduce %s %s root %d", #MPIT, op_names[o], root);       \
            memcpy(tmp, in, sizeof in);                                        \
            if (rank == root)                                                  \
                MPI_Reduce(MPI_IN_PLACE, tmp, NELEM, MPIT, op, root,           \
                           MPI_COMM_WORLD);                                    \
            else                                                               \
                MPI_Reduce(tmp, NULL, NELEM, MPIT, op, root, MPI_COMM_WORLD);  \
            if (rank == root)                                                  \
                CHECK(arr_eq_##NAME(tmp, exp) || bad >= 0,          \
                      "Reduce(IN_PLACE) %s %s root %d", #MPIT, op_names[o],    \
                      root);                                                   \
            else                                                               \
                CHECK(arr_eq_##NAME(tmp, in),                         \
                      "Reduce %s: non-root send buffer modified", #MPIT);      \
        }                                                                      \
    }

#define CAST_LL(x) ((long long)(x))
#define CAST_D(x) ((double)(x))
DEF_RED_TEST(int, int, MPI_INT, 1, 0, APPLY_INT, OSUM, OBXOR, "%lld", CAST_LL)
DEF_RED_TEST(short, short, MPI_SHORT, 1, 0, APPLY_INT, OSUM, OBXOR, "%lld", CAST_LL)
DEF_RED_TEST(unsigned long, ulong, MPI_UNSIGNED_LONG, 0, 0, APPLY_INT, OSUM, OBXOR, "%lld",
             CAST_LL)
DEF_RED_TEST(long long, llong, MPI_LONG_LONG, 1, 0, APPLY_INT, OSUM, OBXOR, "%lld", CAST_LL)
DEF_RED_TEST(double, double, MPI_DOUBLE, 1, 0.5, APPLY_FLT, OSUM, OMAX, "%g", CAST_D)
DEF_RED_TEST(float, float, MPI_FLOAT, 1, 0.5f, APPLY_FLT, OSUM, OMAX, "%g", CAST_D)
DEF_RED_TEST(char, char, MPI_CHAR, 0, 0, APPLY_INT, OSUM, OSUM, "%lld", CAST_LL)
DEF_RED_TEST(bool, cbool, MPI_C_BOOL, 0, 0, APPLY_INT, OLAND, OLXOR, "%lld", CAST_LL)

static void test_predefined_reductions(void)
{
    test_red_int();
    test_red_short();
    test_red_ulong();
    test_red_llong();
    test_red_double();
    test_red_float();
    test_red_char();
    test_red_cbool();

    /* A longer vector, so segmenting algorithms are exercised. */
    enum { L = 10007 };
    int *a = malloc(L * sizeof(int)), *b = malloc(L * sizeof(int));
    for (int i = 0; i < L; i++)
        a[i] = rank * 3 + i;
    MPI_Allreduce(a, b, L, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int ok = 1;
    for (int i = 0; i < L; i++)
        if (b[i] != 3 * size * (size - 1) / 2 + size * i)
            ok = 0;
    CHECK(ok, "Allreduce SUM of %d ints", L);
    MPI_Allreduce(a, b, L, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ok = 1;
    for (int i = 0; i < L; i++)
        if (b[i] != (size - 1) * 3 + i)
            ok = 0;
    CHECK(ok, "Allreduce MAX of %d ints", L);
    free(a);
    free(b);
}

/* ------------------------------------------------------------------ */
/* MINLOC / MAXLOC                                                      */
/* ------------------------------------------------------------------ */

#define DEF_LOC_TEST(VT, NAME, MPIT)                                           \
    static void test_loc_##NAME(void)                                          \
    {                                                                          \
        struct {                                                               \
            VT v;                                                              \
            int i;                                                             \
        } in[8], out[8], tmp[8];                                               \
        for (int j = 0; j < 8; j++) {                                          \
            in[j].v = (VT)((rank * 3 + j) % 4); /* many ties */                \
            in[j].i = rank * 10 + j % 3;                                       \
        }                                                                      \
        for (int w = 0; w < 2; w++) {                                          \
            MPI_Op op = w == 0 ? MPI_MINLOC : MPI_MAXLOC;                      \
            memcpy(tmp, in, sizeof in);                                        \
            MPI_Allreduce(in, out, 8, MPIT, op, MPI_COMM_WORLD);               \
            MPI_Allreduce(MPI_IN_PLACE, tmp, 8, MPIT, op, MPI_COMM_WORLD);     \
            for (int j = 0; j < 8; j++) {                                      \
                VT best = (VT)((0 * 3 + j) % 4);                               \
                int bi = 0 * 10 + j % 3;                                       \
                for (int r = 1; r < size; r++) {                               \
                    VT v = (VT)((r * 3 + j) % 4);                              \
                    int ix = r * 10 + j % 3;                                   \
                    int better = w == 0 ? v < best : v > best;                 \
                    if (better || (v == best && ix < bi)) {                    \
                        best = v;                                              \
                        bi = ix;                                               \
                    }                                                          \
                }                                                              \
                CHECK(out[j].v == best && out[j].i == bi,                      \
                      "%s %s element %d: got (%g,%d) expected (%g,%d)",        \
                      #MPIT, w ? "MAXLOC" : "MINLOC", j, (double)out[j].v,     \
                      out[j].i, (double)best, bi);                             \
                CHECK(tmp[j].v == best && tmp[j].i == bi,                      \
                      "%s %s IN_PLACE element %d", #MPIT,                     \
                      w ? "MAXLOC" : "MINLOC", j);                             \
            }                                                                  \
            /* Reduce to the last rank. */                                     \
            memset(out, 0, sizeof out);                                        \
            MPI_Reduce(in, out, 8, MPIT, op, size - 1, MPI_COMM_WORLD);        \
            if (rank == size - 1)                                              \
                for (int j = 0; j < 8; j++)                                    \
                    CHECK(out[j].v == tmp[j].v && out[j].i == tmp[j].i,        \
                          "%s Reduce %s element %d", #MPIT,                    \
                          w ? "MAXLOC" : "MINLOC", j);                         \
        }                                                                      \
    }

DEF_LOC_TEST(int, 2int, MPI_2INT)
DEF_LOC_TEST(double, double_int, MPI_DOUBLE_INT)
DEF_LOC_TEST(float, float_int, MPI_FLOAT_INT)
DEF_LOC_TEST(long, long_int, MPI_LONG_INT)
DEF_LOC_TEST(short, short_int, MPI_SHORT_INT)

static void test_minmaxloc(void)
{
    test_loc_2int();
    test_loc_double_int();
    test_loc_float_int();
    test_loc_long_int();
    test_loc_short_int();
}

/* ------------------------------------------------------------------ */
/* Barrier / Bcast                                                      */
/* ------------------------------------------------------------------ */

static void test_barrier_bcast(void)
{
    for (int i = 0; i < 10; i++)
        MPI_Barrier(MPI_COMM_WORLD);

    /* A barrier really synchronises: rank 0 enters 0.1 s late.  (Lenient
     * threshold: the ranks leave the previous barrier at slightly different
     * times, by a scheduler slice or more when oversubscribed.) */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (rank == 0)
        while (MPI_Wtime() - t0 < 0.1)
            ;
    MPI_Barrier(MPI_COMM_WORLD);
    double mine = MPI_Wtime() - t0;
    if (size > 1)
        CHECK(mine >= 0.05, "left the barrier after %g s, before rank 0 arrived", mine);

    int bsizes[] = {1, 100, 65536, 1 << 20};
    unsigned char *buf = malloc(1 << 20);
    for (int k = 0; k < 4; k++) {
        for (int root = 0; root < size; root++) {
            int n = bsizes[k];
            if (rank == root)
                fill_pattern(buf, n, root * 31 + k);
            else
                memset(buf, 0, n);
            MPI_Bcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD);
            long bad = check_pattern(buf, n, root * 31 + k);
            CHECK(bad < 0, "Bcast %d bytes from root %d: mismatch at %ld", n, root, bad);
        }
    }
    double d[300];
    for (int root = 0; root < size; root++) {
        for (int i = 0; i < 300; i++)
            d[i] = rank == root ? root + i * 0.25 : -1;
        MPI_Bcast(d, 300, MPI_DOUBLE, root, MPI_COMM_WORLD);
        int ok = 1;
        for (int i = 0; i < 300; i++)
            if (d[i] != root + i * 0.25)
                ok = 0;
        CHECK(ok, "Bcast doubles from root %d", root);
    }
    /* Zero-count bcast is legal. */
    MPI_Bcast(buf, 0, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(buf);
}

/* ------------------------------------------------------------------ */
/* Gather / Scatter family                                              */
/* ------------------------------------------------------------------ */

static void test_gather_scatter(void)
{
    enum { C = 5 };
    int sbuf[C], *rbuf = malloc(size * C * sizeof(int) + 64);

    /* Allgather. */
    for (int i = 0; i < C; i++)
        sbuf[i] = rank * 100 + i;
    memset(rbuf, 0xFF, size * C * sizeof(int));
    MPI_Allgather(sbuf, C, MPI_INT, rbuf, C, MPI_INT, MPI_COMM_WORLD);
    int ok = 1;
    for (int r = 0; r < size; r++)
        for (int i = 0; i < C; i++)
            if (rbuf[r * C + i] != r * 100 + i)
                ok = 0;
    CHECK(ok, "Allgather");

    /* Allgather in place. */
    memset(rbuf, 0xFF, size * C * sizeof(int));
    for (int i = 0; i < C; i++)
        rbuf[rank * C + i] = rank * 100 + i;
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rbuf, C, MPI_INT, MPI_COMM_WORLD);
    ok = 1;
    for (int r = 0; r < size; r++)
        for (int i = 0; i < C; i++)
            if (rbuf[r * C + i] != r * 100 + i)
                ok = 0;
    CHECK(ok, "Allgather(IN_PLACE)");

    /* Allgatherv: rank r contributes r+1 ints at displacement with gaps. */
    {
        int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
        int total = 0;
        for (int r = 0; r < size; r++) {
            counts[r] = r + 1;
            displs[r] = total + 1; /* one-int gap before each block */
            total += counts[r] + 1;
        }
        int *rv = malloc((total + 1) * sizeof(int)), sv[8];
        for (int i = 0; i < rank + 1; i++)
            sv[i] = rank * 1000 + i;
        for (int i = 0; i <= total; i++)
            rv[i] = -7;
        MPI_Allgatherv(sv, rank + 1, MPI_INT, rv, counts, displs, MPI_INT, MPI_COMM_WORLD);
        ok = 1;
        for (int r = 0; r < size; r++) {
            for (int i = 0; i < counts[r]; i++)
                if (rv[displs[r] + i] != r * 1000 + i)
                    ok = 0;
            if (rv[displs[r] - 1] != -7)
                ok = 0;
        }
        /* MPICH 4.0.2 with one process ignores displs[0] (copies to rv[0]). */
        if (size == 1)
            CHECK_STD(ok, "Allgatherv with one process ignored displs[0] = %d", displs[0]);
        else
            CHECK(ok, "Allgatherv");

        /* Gatherv to each root (reversed block order at root). */
        for (int root = 0; root < size; root++) {
            int pos = 0;
            for (int r = size - 1; r >= 0; r--) {
                displs[r] = pos;
                pos += counts[r] + 2;
            }
            rv = realloc(rv, (total + size + 8) * sizeof(int));
            for (int i = 0; i < total + size + 8; i++)
                rv[i] = -7;
            MPI_Gatherv(sv, rank + 1, MPI_INT, rv, counts, displs, MPI_INT, root,
                        MPI_COMM_WORLD);
            if (rank == root) {
                ok = 1;
                for (int r = 0; r < size; r++) {
                    for (int i = 0; i < counts[r]; i++)
                        if (rv[displs[r] + i] != r * 1000 + i)
                            ok = 0;
                    if (rv[displs[r] + counts[r]] != -7)
                        ok = 0;
                }
                CHECK(ok, "Gatherv root %d", root);
            }
        }

        /* Scatterv: root sends (r % 3) + 1 ints to rank r, blocks reversed. */
        for (int root = 0; root < size; root++) {
            int pos = 0;
            for (int r = size - 1; r >= 0; r--) {
                counts[r] = r % 3 + 1;
                displs[r] = pos;
                pos += counts[r] + 1;
            }
            int *src = malloc((pos + 1) * sizeof(int));
            for (int r = 0; r < size; r++)
                for (int i = 0; i < counts[r]; i++)
                    src[displs[r] + i] = root * 10000 + r * 100 + i;
            int got[4] = {-1, -1, -1, -1};
            MPI_Scatterv(src, counts, displs, MPI_INT, got, rank % 3 + 1, MPI_INT, root,
                         MPI_COMM_WORLD);
            ok = 1;
            for (int i = 0; i < rank % 3 + 1; i++)
                if (got[i] != root * 10000 + rank * 100 + i)
                    ok = 0;
            if (got[rank % 3 + 1] != -1)
                ok = 0;
            CHECK(ok, "Scatterv root %d", root);
            free(src);
        }
        free(rv);
        free(counts);
        free(displs);
    }

    /* Gather / Scatter to every root, normal and in place. */
    for (int root = 0; root < size; root++) {
        for (int i = 0; i < C; i++)
            sbuf[i] = rank * 100 + root * 7 + i;
        memset(rbuf, 0xFF, size * C * sizeof(int));
        MPI_Gather(sbuf, C, MPI_INT, rbuf, C, MPI_INT, root, MPI_COMM_WORLD);
        if (rank == root) {
            ok = 1;
            for (int r = 0; r < size; r++)
                for (int i = 0; i < C; i++)
                    if (rbuf[r * C + i] != r * 100 + root * 7 + i)
                        ok = 0;
            CHECK(ok, "Gather root %d", root);
        }

        memset(rbuf, 0xFF, size * C * sizeof(int));
        if (rank == root) {
            for (int i = 0; i < C; i++)
                rbuf[root * C + i] = rank * 100 + root * 7 + i;
            MPI_Gather(MPI_IN_PLACE, C, MPI_INT, rbuf, C, MPI_INT, root, MPI_COMM_WORLD);
            ok = 1;
            for (int r = 0; r < size; r++)
                for (int i = 0; i < C; i++)
                    if (rbuf[r * C + i] != r * 100 + root * 7 + i)
                        ok = 0;
            CHECK(ok, "Gather(IN_PLACE) root %d", root);
        } else {
            MPI_Gather(sbuf, C, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, root, MPI_COMM_WORLD);
        }

        /* Scatter. */
        if (rank == root)
            for (int r = 0; r < size; r++)
                for (int i = 0; i < C; i++)
                    rbuf[r * C + i] = root * 1000 + r * 10 + i;
        int got[C];
        memset(got, 0xFF, sizeof got);
        MPI_Scatter(rbuf, C, MPI_INT, got, C, MPI_INT, root, MPI_COMM_WORLD);
        ok = 1;
        for (int i = 0; i < C; i++)
            if (got[i] != root * 1000 + rank * 10 + i)
                ok = 0;
        CHECK(ok, "Scatter root %d", root);

        /* Scatter in place: root keeps its block in the send buffer. */
        if (rank == root) {
            MPI_Scatter(rbuf, C, MPI_INT, MPI_IN_PLACE, C, MPI_INT, root, MPI_COMM_WORLD);
            ok = 1;
            for (int r = 0; r < size; r++)
                for (int i = 0; i < C; i++)
                    if (rbuf[r * C + i] != root * 1000 + r * 10 + i)
                        ok = 0;
            CHECK(ok, "Scatter(IN_PLACE) root %d modified the send buffer", root);
        } else {
            memset(got, 0xFF, sizeof got);
            MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, got, C, MPI_INT, root, MPI_COMM_WORLD);
            ok = 1;
            for (int i = 0; i < C; i++)
                if (got[i] != root * 1000 + rank * 10 + i)
                    ok = 0;
            CHECK(ok, "Scatter(IN_PLACE at root) root %d", root);
        }
    }
    free(rbuf);
}

static void test_alltoall(void)
{
    enum { C = 3 };
    int *s = malloc(size * C * sizeof(int)), *r = malloc(size * C * sizeof(int));
    for (int j = 0; j < size; j++)
        for (int k = 0; k < C; k++)
            s[j * C + k] = rank * 1000 + j * 10 + k;
    MPI_Alltoall(s, C, MPI_INT, r, C, MPI_INT, MPI_COMM_WORLD);
    int ok = 1;
    for (int j = 0; j < size; j++)
        for (int k = 0; k < C; k++)
            if (r[j * C + k] != j * 1000 + rank * 10 + k)
                ok = 0;
    CHECK(ok, "Alltoall");
    free(s);
    free(r);

    /* Alltoallv: rank a sends (a + b) % 3 + 1 ints to rank b (symmetric). */
    int *sc = malloc(size * sizeof(int)), *sd = malloc(size * sizeof(int));
    int *rc = malloc(size * sizeof(int)), *rd = malloc(size * sizeof(int));
    int spos = 0, rpos = 0;
    for (int j = 0; j < size; j++) {
        sc[j] = (rank + j) % 3 + 1;
        sd[j] = spos;
        spos += sc[j] + 1;
    }
    for (int j = size - 1; j >= 0; j--) { /* receive blocks in reverse order */
        rc[j] = (j + rank) % 3 + 1;
        rd[j] = rpos;
        rpos += rc[j] + 2;
    }
    s = malloc((spos + 1) * sizeof(int));
    r = malloc((rpos + 1) * sizeof(int));
    for (int j = 0; j < size; j++)
        for (int k = 0; k < sc[j]; k++)
            s[sd[j] + k] = rank * 1000 + j * 10 + k;
    for (int i = 0; i <= rpos; i++)
        r[i] = -3;
    MPI_Alltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, MPI_COMM_WORLD);
    ok = 1;
    for (int j = 0; j < size; j++) {
        for (int k = 0; k < rc[j]; k++)
            if (r[rd[j] + k] != j * 1000 + rank * 10 + k)
                ok = 0;
        if (r[rd[j] + rc[j]] != -3)
            ok = 0;
    }
    CHECK(ok, "Alltoallv");
    free(s);
    free(r);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

static void test_reduce_scatter_scan(void)
{
    /* Reduce_scatter: block i has i+1 elements. */
    int total = size * (size + 1) / 2;
    int *in = malloc(total * sizeof(int)), *counts = malloc(size * sizeof(int));
    for (int i = 0; i < size; i++)
        counts[i] = i + 1;
    for (int e = 0; e < total; e++)
        in[e] = rank * 3 + e;
    int out[8];
    memset(out, 0xFF, sizeof out);
    MPI_Reduce_scatter(in, out, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int off = rank * (rank + 1) / 2;
    int ok = 1;
    for (int i = 0; i < rank + 1; i++)
        if (out[i] != 3 * size * (size - 1) / 2 + size * (off + i))
            ok = 0;
    CHECK(ok, "Reduce_scatter");
    free(in);
    free(counts);

    /* Reduce_scatter_block, normal and in place. */
    enum { B = 4 };
    int *bin = malloc(size * B * sizeof(int));
    for (int e = 0; e < size * B; e++)
        bin[e] = rank + e * 2;
    int bout[B];
    MPI_Reduce_scatter_block(bin, bout, B, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ok = 1;
    for (int i = 0; i < B; i++)
        if (bout[i] != size * (size - 1) / 2 + size * 2 * (rank * B + i))
            ok = 0;
    CHECK(ok, "Reduce_scatter_block");
    MPI_Reduce_scatter_block(MPI_IN_PLACE, bin, B, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ok = 1;
    for (int i = 0; i < B; i++)
        if (bin[i] != size - 1 + 2 * (rank * B + i))
            ok = 0;
    CHECK(ok, "Reduce_scatter_block(IN_PLACE)");
    free(bin);

    /* Scan / Exscan. */
    int v[3] = {rank + 1, 2 * rank, 1}, sc[3] = {-1, -1, -1}, ex[3] = {-1, -1, -1};
    MPI_Scan(v, sc, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sc[0] == (rank + 1) * (rank + 2) / 2 && sc[1] == rank * (rank + 1) &&
              sc[2] == rank + 1,
          "Scan got %d %d %d", sc[0], sc[1], sc[2]);
    MPI_Exscan(v, ex, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank > 0)
        CHECK(ex[0] == rank * (rank + 1) / 2 && ex[1] == rank * (rank - 1) && ex[2] == rank,
              "Exscan got %d %d %d", ex[0], ex[1], ex[2]);
    int mx = -1;
    int mine = (rank * 5) % 3;
    MPI_Scan(&mine, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int expect = 0;
    for (int r = 0; r <= rank; r++)
        if ((r * 5) % 3 > expect)
            expect = (r * 5) % 3;
    CHECK(mx == expect, "Scan MAX got %d expected %d", mx, expect);
    /* Scan in place. */
    int ip = rank + 1;
    MPI_Scan(MPI_IN_PLACE, &ip, 1, MPI_INT, MPI_PROD, MPI_COMM_WORLD);
    int fact = 1;
    for (int r = 1; r <= rank + 1; r++)
        fact *= r;
    CHECK(ip == fact, "Scan(IN_PLACE) PROD got %d expected %d", ip, fact);

    /* Reduce_local: inout = in op inout. */
    int a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
    MPI_Reduce_local(a, b, 3, MPI_INT, MPI_SUM);
    CHECK(b[0] == 11 && b[1] == 22 && b[2] == 33, "Reduce_local SUM %d %d %d", b[0], b[1],
          b[2]);
    double da[2] = {1.5, -2}, db[2] = {1, 4};
    MPI_Reduce_local(da, db, 2, MPI_DOUBLE, MPI_MAX);
    CHECK(db[0] == 1.5 && db[1] == 4, "Reduce_local MAX %g %g", db[0], db[1]);
}

/* ------------------------------------------------------------------ */
/* Nonblocking collectives                                              */
/* ------------------------------------------------------------------ */

static void test_nonblocking_coll(void)
{
    MPI_Request rq;
    MPI_Status st;
    MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, &st);
    CHECK(rq == MPI_REQUEST_NULL, "Ibarrier Wait did not null the request");

    MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    int flag = 0;
    while (!flag)
        MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);

    int n = 1 << 20;
    unsigned char *buf = malloc(n);
    for (int root = 0; root < size; root++) {
        if (rank == root)
            fill_pattern(buf, n, 900 + root);
        else
            memset(buf, 0, n);
        MPI_Ibcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD, &rq);
        if (root % 2 == 0) {
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
        } else {
            flag = 0;
            while (!flag)
                MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
        }
        CHECK(check_pattern(buf, n, 900 + root) < 0, "Ibcast 1 MiB from root %d", root);
    }
    int small = rank == 0 ? 4242 : 0;
    MPI_Ibcast(&small, 1, MPI_INT, 0, MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(small == 4242, "Ibcast int got %d", small);
    free(buf);

    enum { L = 1000 };
    double in[L], out[L];
    for (int i = 0; i < L; i++)
        in[i] = rank + i;
    MPI_Iallreduce(in, out, L, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    int ok = 1;
    for (int i = 0; i < L; i++)
        if (out[i] != size * (size - 1) / 2.0 + (double)size * i)
            ok = 0;
    CHECK(ok, "Iallreduce + Wait");

    memset(out, 0, sizeof out);
    MPI_Iallreduce(in, out, L, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &rq);
    flag = 0;
    long spins = 0;
    while (!flag) {
        MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
        spins++;
    }
    ok = 1;
    for (int i = 0; i < L; i++)
        if (out[i] != size - 1 + i)
            ok = 0;
    CHECK(ok, "Iallreduce + Test loop (%ld tests)", spins);

    /* Two outstanding nonblocking collectives completed with Waitall. */
    MPI_Request two[2];
    int x = rank, y = -1;
    MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &two[0]);
    MPI_Ibarrier(MPI_COMM_WORLD, &two[1]);
    MPI_Waitall(2, two, MPI_STATUSES_IGNORE);
    CHECK(y == size * (size - 1) / 2, "Iallreduce+Ibarrier Waitall got %d", y);
    /* In place. */
    x = rank + 1;
    MPI_Iallreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(x == size * (size + 1) / 2, "Iallreduce(IN_PLACE) got %d", x);
}

/* Non-blocking collectives must not wait for the other ranks inside the
 * call: rank 0 starts each one, then sends the token the others receive
 * before they start theirs (a blocking start would deadlock). */
static void test_nonblocking_returns_at_once(void)
{
    MPI_Request rq;
    int token = 0;
    int mine[2] = {rank * 10, rank * 10 + 1};
    int *all = malloc(sizeof(int) * 2 * size);
    int *wide = malloc(sizeof(int) * 4 * size); /* every other int */
    int *sendv = malloc(sizeof(int) * 2 * size), *recvv = malloc(sizeof(int) * 2 * size);
    /* One rank's block: two ints, one apart, then room to the next block. */
    MPI_Datatype pair_apart, every_other;
    MPI_Type_vector(2, 1, 2, MPI_INT, &pair_apart);
    MPI_Type_create_resized(pair_apart, 0, 4 * sizeof(int), &every_other);
    MPI_Type_free(&pair_apart);
    MPI_Type_commit(&every_other);

    int v = rank + 1, sum = -1;
    double dv[3];
    for (int round = 0; round < 6; round++) {
        sum = -1;
        for (int i = 0; i < 3; i++)
            dv[i] = rank + i;
        for (int i = 0; i < 2 * size; i++) {
            all[i] = -1;
            sendv[i] = rank * 100 + i;
            recvv[i] = -1;
        }
        for (int i = 0; i < 4 * size; i++)
            wide[i] = -1;
        if (rank != 0)
            MPI_Recv(&token, 1, MPI_INT, 0, 800 + round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (round == 0)
            MPI_Iallgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD, &rq);
        else if (round == 1)
            MPI_Iallgather(mine, 2, MPI_INT, wide, 1, every_other, MPI_COMM_WORLD, &rq);
        else if (round == 2) {
            all[2 * rank] = mine[0];
            all[2 * rank + 1] = mine[1];
            MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 2, MPI_INT, MPI_COMM_WORLD, &rq);
        } else if (round == 3)
            MPI_Ialltoall(sendv, 2, MPI_INT, recvv, 2, MPI_INT, MPI_COMM_WORLD, &rq);
        else if (round == 4)
            MPI_Ireduce(&v, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &rq);
        else
            MPI_Ireduce(rank == 0 ? MPI_IN_PLACE : dv, dv, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD, &rq);
        if (rank == 0)
            for (int r = 1; r < size; r++)
                MPI_Send(&round, 1, MPI_INT, r, 800 + round, MPI_COMM_WORLD);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        bool ok = true;
        for (int r = 0; r < size; r++) {
            if (round == 0 || round == 2)
                ok = ok && all[2 * r] == r * 10 && all[2 * r + 1] == r * 10 + 1;
            else if (round == 1)
                ok = ok && wide[4 * r] == r * 10 && wide[4 * r + 1] == -1 && wide[4 * r + 2] == r * 10 + 1 &&
                     wide[4 * r + 3] == -1;
            else if (round == 3)
                ok = ok && recvv[2 * r] == r * 100 + 2 * rank && recvv[2 * r + 1] == r * 100 + 2 * rank + 1;
        }
        if (round == 4 && rank == 0)
            ok = sum == size * (size + 1) / 2;
        if (round == 5 && rank == 0)
            ok = dv[0] == size - 1 && dv[2] == size + 1;
        CHECK(ok, "non-blocking collective started before the others joined, round %d", round);
    }
    MPI_Type_free(&every_other);
    free(all);
    free(wide);
    free(sendv);
    free(recvv);
}

/* long double: SUM keeps what a double would lose, MAXLOC on
 * LONG_DOUBLE_INT, PROD on C_LONG_DOUBLE_COMPLEX (x86-64's 80-bit format). */
static void test_long_double(void)
{
    long double tiny = 1.0L / (1ULL << 60), x = rank == 0 ? 1.0L : tiny, sum = 0;
    MPI_Allreduce(&x, &sum, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    long double want = 1.0L + (size - 1) * tiny;
    CHECK(sum == want, "long double SUM lost precision (%Lg - 1 = %Lg)", sum, sum - 1.0L);
    struct { long double v; int i; } in = {(long double)(rank % 3), rank}, out = {-1, -1};
    MPI_Allreduce(&in, &out, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    int best = size > 2 ? 2 : size - 1;
    CHECK(out.v == (long double)best && out.i == best, "LONG_DOUBLE_INT MAXLOC got (%Lg, %d)", out.v, out.i);
    long double _Complex z = 1.0L + 1.0L * _Complex_I, p = 0;
    MPI_Allreduce(&z, &p, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD);
    long double _Complex w = 1.0L;
    for (int r = 0; r < size; r++)
        w *= z;
    CHECK(p == w, "C_LONG_DOUBLE_COMPLEX PROD got %Lg%+Lgi", __real__ p, __imag__ p);
}

/* ------------------------------------------------------------------ */
/* User-defined operations                                              */
/* ------------------------------------------------------------------ */

static int user_calls = 0;
static int user_bad_type = 0;

/* Commutative: element-wise max of absolute values. */
static void absmax_fn(void *invec, void *inoutvec, int *len, MPI_Datatype *dt)
{
    int *a = invec, *b = inoutvec;
    if (*dt != MPI_INT)
        user_bad_type++;
    for (int i = 0; i < *len; i++) {
        int x = a[i] < 0 ? -a[i] : a[i], y = b[i] < 0 ? -b[i] : b[i];
        b[i] = x > y ? x : y;
    }
    user_calls++;
}

/* Non-commutative: 2x2 matrix product, inout = in * inout. */
static MPI_Datatype mat_type;
static void matmul_fn(void *invec, void *inoutvec, int *len, MPI_Datatype *dt)
{
    int *a = invec, *b = inoutvec;
    if (*dt != mat_type)
        user_bad_type++;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c0 = a[0] * b[0] + a[1] * b[2];
        int c1 = a[0] * b[1] + a[1] * b[3];
        int c2 = a[2] * b[0] + a[3] * b[2];
        int c3 = a[2] * b[1] + a[3] * b[3];
        b[0] = c0;
        b[1] = c1;
        b[2] = c2;
        b[3] = c3;
    }
    user_calls++;
}

/* Matrix for element k on rank r: alternately upper and lower shears, so
 * products depend on order. */
static void rank_matrix(int r, int k, int m[4])
{
    int s = (r + k) % 3 + 1;
    if ((r + k) % 2 == 0) {
        m[0] = 1; m[1] = s; m[2] = 0; m[3] = 1;
    } else {
        m[0] = 1; m[1] = 0; m[2] = s; m[3] = 1;
    }
}

static void matmul_ref(const int a[4], int b[4]) /* b = a * b */
{
    int len = 1;
    MPI_Datatype saved = mat_type;
    matmul_fn((void *)a, b, &len, &saved);
    user_calls--;
}

static void test_user_ops(void)
{
    MPI_Op absmax, matmul;
    MPI_Op_create(absmax_fn, 1, &absmax);
    MPI_Op_create(matmul_fn, 0, &matmul);

    enum { L = 50 };
    int in[L], out[L];
    for (int i = 0; i < L; i++)
        in[i] = ((rank + i) % 2 ? -1 : 1) * (rank * 3 + i % 5);
    MPI_Allreduce(in, out, L, MPI_INT, absmax, MPI_COMM_WORLD);
    int ok = 1;
    for (int i = 0; i < L; i++) {
        int e = 0;
        for (int r = 0; r < size; r++) {
            int v = r * 3 + i % 5;
            if (v > e)
                e = v;
        }
        if (size == 1) /* a single contribution is returned unchanged */
            e = in[i];
        if (out[i] != e)
            ok = 0;
    }
    CHECK(ok, "user commutative op Allreduce");
    CHECK(user_bad_type == 0, "user op saw wrong datatype");
    int calls_total = 0;
    MPI_Allreduce(&user_calls, &calls_total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (size > 1)
        CHECK(calls_total > 0, "user op never called on any rank");

    MPI_Type_contiguous(4, MPI_INT, &mat_type);
    MPI_Type_commit(&mat_type);
    enum { K = 6 };
    int m[K][4], res[K][4], expect[K][4];
    for (int k = 0; k < K; k++) {
        rank_matrix(rank, k, m[k]);
        rank_matrix(size - 1, k, expect[k]);
        for (int r = size - 2; r >= 0; r--) { /* expect = M0 * M1 * ... */
            int mr[4];
            rank_matrix(r, k, mr);
            matmul_ref(mr, expect[k]);
        }
    }
    memset(res, 0, sizeof res);
    MPI_Allreduce(m, res, K, mat_type, matmul, MPI_COMM_WORLD);
    CHECK(memcmp(res, expect, sizeof res) == 0,
          "non-commutative Allreduce: got [%d %d %d %d] expected [%d %d %d %d]", res[0][0],
          res[0][1], res[0][2], res[0][3], expect[0][0], expect[0][1], expect[0][2],
          expect[0][3]);
    for (int root = 0; root < size; root++) {
        memset(res, 0, sizeof res);
        MPI_Reduce(m, res, K, mat_type, matmul, root, MPI_COMM_WORLD);
        if (rank == root)
            CHECK(memcmp(res, expect, sizeof res) == 0, "non-commutative Reduce root %d",
                  root);
    }
    /* Scan with the non-commutative op: prefix product M0 * ... * Mrank. */
    int pre[K][4];
    for (int k = 0; k < K; k++) {
        rank_matrix(rank, k, pre[k]);
        for (int r = rank - 1; r >= 0; r--) {
            int mr[4];
            rank_matrix(r, k, mr);
            matmul_ref(mr, pre[k]);
        }
    }
    memset(res, 0, sizeof res);
    MPI_Scan(m, res, K, mat_type, matmul, MPI_COMM_WORLD);
    CHECK(memcmp(res, pre, sizeof res) == 0, "non-commutative Scan");

    /* Reduce_local with the non-commutative op: inout = in * inout. */
    int a[4] = {1, 2, 0, 1}, b[4] = {1, 0, 3, 1};
    MPI_Reduce_local(a, b, 1, mat_type, matmul);
    /* [1 2;0 1]*[1 0;3 1] = [7 2;3 1] */
    CHECK(b[0] == 7 && b[1] == 2 && b[2] == 3 && b[3] == 1,
          "Reduce_local non-commutative order: [%d %d %d %d]", b[0], b[1], b[2], b[3]);
    CHECK(user_bad_type == 0, "matmul op saw wrong datatype");

    MPI_Op_free(&absmax);
    MPI_Op_free(&matmul);
    CHECK(absmax == MPI_OP_NULL && matmul == MPI_OP_NULL, "Op_free did not null handles");
    MPI_Type_free(&mat_type);
}

/* A user function that calls the library's local functions: it makes
 * and frees a datatype and an operation on every call (the library
 * must not hold its tables while the function runs). */
static int reentrant_failures = 0;
static void reentrant_fn(void *invec, void *inoutvec, int *len, MPI_Datatype *dt)
{
    int *a = invec, *b = inoutvec;
    MPI_Datatype t;
    MPI_Op o;
    int sz = 0;
    if (MPI_Type_contiguous(2, *dt, &t) != MPI_SUCCESS || MPI_Type_commit(&t) != MPI_SUCCESS ||
        MPI_Type_size(t, &sz) != MPI_SUCCESS || sz != 2 * (int)sizeof(int) ||
        MPI_Type_free(&t) != MPI_SUCCESS)
        reentrant_failures++;
    if (MPI_Op_create(absmax_fn, 1, &o) != MPI_SUCCESS || MPI_Op_free(&o) != MPI_SUCCESS ||
        o != MPI_OP_NULL)
        reentrant_failures++;
    for (int i = 0; i < *len; i++)
        b[i] += a[i];
}

static void test_user_op_calls_library(void)
{
    MPI_Op op;
    MPI_Op_create(reentrant_fn, 1, &op);
    int in[3] = {1, 2, 3}, io[3] = {10, 20, 30};
    CHECK(MPI_Reduce_local(in, io, 3, MPI_INT, op) == MPI_SUCCESS && io[0] == 11 && io[2] == 33,
          "Reduce_local with a user function that calls MPI_Type_free/MPI_Op_create");
    int v[4] = {rank, 1, 2 * rank, 3}, out[4] = {0};
    CHECK(MPI_Allreduce(v, out, 4, MPI_INT, op, MPI_COMM_WORLD) == MPI_SUCCESS,
          "Allreduce with a reentrant user function");
    int n = size;
    CHECK(out[0] == n * (n - 1) / 2 && out[1] == n && out[2] == n * (n - 1) && out[3] == 3 * n,
          "Allreduce with a reentrant user function: sums");
    CHECK(reentrant_failures == 0, "library calls inside a user function failed");
    MPI_Op_free(&op);
}

/* Reductions through derived types with holes, a lower bound, a resized
 * extent, pairs in a derived layout and absolute addresses: the data of
 * the type map is reduced, and nothing between its blocks is written. */
static int vec_user_bad = 0;
static MPI_Datatype vec_for_user;
static void vec_sum_fn(void *invec, void *inoutvec, int *len, MPI_Datatype *dt)
{
    int *a = invec, *b = inoutvec;
    if (*dt != vec_for_user)
        vec_user_bad++;
    for (int k = 0; k < *len; k++) { /* an element: ints 0 and 2 of 3 */
        b[3 * k] += a[3 * k];
        b[3 * k + 2] += a[3 * k + 2];
    }
}

/* Whether a reduction through a derived type ran: the standard lets a
 * predefined operation reduce any type whose elements are all of one
 * basic type, which the reference MPICH 4.0.2 refuses for resized and
 * struct types (MPI_ERR_OP): a NOTE there, a failure on tandem. */
static int reduced(int rc, const char *what)
{
    CHECK_STD(rc == MPI_SUCCESS, "%s refused (rc %d)", what, rc);
    if (rc != MPI_SUCCESS && !g_lenient_ref)
        return 0;
    return rc == MPI_SUCCESS;
}

static void test_derived_reductions(void)
{
    int n = size;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Datatype vec; /* ints 0 and 2; extent 3 ints (a hole in, one after) */
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    MPI_Datatype vec3;
    MPI_Type_create_resized(vec, 0, 3 * sizeof(int), &vec3);
    MPI_Type_commit(&vec3);
    MPI_Type_free(&vec);
    enum { E = 4 };
    int in[3 * E], out[3 * E];
    for (int i = 0; i < 3 * E; i++) {
        in[i] = rank * 10 + i;
        out[i] = -1;
    }
    int ran1 = reduced(MPI_Allreduce(in, out, E, vec3, MPI_SUM, MPI_COMM_WORLD), "Allreduce of a vector type");
    int ok = 1;
    for (int i = 0; i < 3 * E; i++) {
        int data = i % 3 != 1;
        int want = data ? 10 * n * (n - 1) / 2 + n * i : -1;
        if (out[i] != want)
            ok = 0;
    }
    CHECK(!ran1 || ok, "Allreduce of a vector type: data summed, holes untouched");

    /* In place, and a non-commutative order through Exscan. */
    for (int i = 0; i < 3 * E; i++)
        out[i] = i % 3 == 1 ? -7 : rank + i;
    int ran2 = reduced(MPI_Allreduce(MPI_IN_PLACE, out, E, vec3, MPI_MAX, MPI_COMM_WORLD), "Allreduce in place of a vector type");
    ok = 1;
    for (int i = 0; i < 3 * E; i++)
        if (out[i] != (i % 3 == 1 ? -7 : n - 1 + i))
            ok = 0;
    CHECK(!ran2 || ok, "Allreduce in place of a vector type: max, holes kept");
    for (int i = 0; i < 3 * E; i++)
        out[i] = -1;
    int ran3 = reduced(MPI_Exscan(in, out, E, vec3, MPI_SUM, MPI_COMM_WORLD), "Exscan of a vector type");
    ok = 1;
    if (rank > 0)
        for (int i = 0; i < 3 * E; i++) {
            int want = i % 3 == 1 ? -1 : 10 * rank * (rank - 1) / 2 + rank * i;
            if (out[i] != want)
                ok = 0;
        }
    CHECK(!ran3 || ok, "Exscan of a vector type");

    /* A lower bound: resized int with lb -4, extent 8 (data every other
     * int), reduced to the last rank. */
    MPI_Datatype shifted;
    MPI_Type_create_resized(MPI_INT, -4, 8, &shifted);
    MPI_Type_commit(&shifted);
    for (int i = 0; i < 3 * E; i++)
        out[i] = -1;
    int ran4 = reduced(MPI_Reduce(in + 1, out + 1, E, shifted, MPI_MAX, n - 1, MPI_COMM_WORLD), "Reduce of a type with a lower bound");
    ok = 1;
    for (int i = 0; i < 3 * E; i++) {
        int data = rank == n - 1 && i >= 1 && i < 1 + 2 * E && (i - 1) % 2 == 0;
        if (out[i] != (data ? (n - 1) * 10 + i : -1))
            ok = 0;
    }
    CHECK(!ran4 || ok, "Reduce of a type with a lower bound: the root's data, nothing else");
    MPI_Type_free(&shifted);

    /* Pairs in a derived layout: MPI_2INT every 3 ints, MAXLOC in Scan. */
    MPI_Datatype pairs;
    MPI_Type_create_resized(MPI_2INT, 0, 3 * sizeof(int), &pairs);
    MPI_Type_commit(&pairs);
    int pin[3 * 2], pout[3 * 2];
    for (int k = 0; k < 2; k++) {
        pin[3 * k] = (rank * (k + 3)) % 5;
        pin[3 * k + 1] = rank;
        pin[3 * k + 2] = 99;
        pout[3 * k] = pout[3 * k + 1] = pout[3 * k + 2] = -1;
    }
    int ran5 = reduced(MPI_Scan(pin, pout, 2, pairs, MPI_MAXLOC, MPI_COMM_WORLD), "Scan of MPI_2INT in a resized layout");
    ok = 1;
    for (int k = 0; k < 2; k++) {
        int best = -1, at = -1;
        for (int r = 0; r <= rank; r++)
            if ((r * (k + 3)) % 5 > best) {
                best = (r * (k + 3)) % 5;
                at = r;
            }
        if (pout[3 * k] != best || pout[3 * k + 1] != at || pout[3 * k + 2] != -1)
            ok = 0;
    }
    CHECK(!ran5 || ok, "Scan MAXLOC of pairs in a resized layout");
    MPI_Type_free(&pairs);

    /* Reduce_scatter of a vector type with uneven counts (rank i gets
     * i + 1 elements). */
    int *counts = malloc(n * sizeof(int));
    int total = 0;
    for (int i = 0; i < n; i++)
        total += counts[i] = i + 1;
    int *rin = malloc(3 * total * sizeof(int)), *rout = malloc(3 * (n + 1) * sizeof(int));
    for (int i = 0; i < 3 * total; i++)
        rin[i] = rank + 2 * i;
    for (int i = 0; i < 3 * (n + 1); i++)
        rout[i] = -1;
    int ran6 = reduced(MPI_Reduce_scatter(rin, rout, counts, vec3, MPI_SUM, MPI_COMM_WORLD), "Reduce_scatter of a vector type");
    int first = rank * (rank + 1) / 2; /* my first element */
    ok = 1;
    for (int i = 0; i < 3 * (n + 1); i++) {
        int data = i < 3 * counts[rank] && i % 3 != 1;
        int want = data ? n * (n - 1) / 2 + n * 2 * (3 * first + i) : -1;
        if (rout[i] != want)
            ok = 0;
    }
    CHECK(!ran6 || ok, "Reduce_scatter of a vector type: my blocks, holes untouched");
    free(counts);
    free(rin);
    free(rout);

    /* A user operation sees the type's layout. */
    MPI_Op vsum;
    vec_for_user = vec3;
    MPI_Op_create(vec_sum_fn, 0, &vsum);
    for (int i = 0; i < 3 * E; i++)
        out[i] = -1;
    int ran7 = MPI_Allreduce(in, out, E, vec3, vsum, MPI_COMM_WORLD) == MPI_SUCCESS;
    CHECK(ran7, "Allreduce of a vector type with a user operation");
    ok = 1;
    for (int i = 0; i < 3 * E; i++)
        if (out[i] != (i % 3 != 1 ? 10 * n * (n - 1) / 2 + n * i : -1))
            ok = 0;
    CHECK(!ran7 || (ok && vec_user_bad == 0), "user operation on a vector type");
    MPI_Op_free(&vsum);
    MPI_Type_free(&vec3);

    /* Absolute addresses: two separate ints through a struct type at
     * MPI_BOTTOM, reduced in place. */
    int x = rank + 1;
    double pad = 0;
    int y = 2 * rank;
    MPI_Aint ax, ay;
    MPI_Get_address(&x, &ax);
    MPI_Get_address(&y, &ay);
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {ax, ay};
    MPI_Datatype tys[2] = {MPI_INT, MPI_INT}, abs_t;
    MPI_Type_create_struct(2, bl, disp, tys, &abs_t);
    MPI_Type_commit(&abs_t);
    int ran8 = reduced(MPI_Allreduce(MPI_IN_PLACE, MPI_BOTTOM, 1, abs_t, MPI_SUM, MPI_COMM_WORLD), "Allreduce at MPI_BOTTOM of a struct of absolute addresses");
    CHECK(!ran8 || (x == n * (n + 1) / 2 && y == n * (n - 1) && pad == 0),
          "Allreduce at MPI_BOTTOM: %d %d", x, y);
    MPI_Type_free(&abs_t);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void test_large_allreduce(void)
{
    int n = 1 << 20;
    double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
    for (int i = 0; i < n; i++)
        in[i] = (rank + 1) * 0.5 + (i % 1000);
    double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    int bad = -1;
    for (int i = 0; i < n; i++) {
        double e = 0.5 * size * (size + 1) / 2.0 + (double)size * (i % 1000);
        if (out[i] != e) {
            bad = i;
            break;
        }
    }
    CHECK(bad < 0, "Allreduce 1M doubles: element %d wrong", bad);
    MPI_Allreduce(MPI_IN_PLACE, in, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    bad = -1;
    for (int i = 0; i < n; i++)
        if (in[i] != size * 0.5 + (i % 1000)) {
            bad = i;
            break;
        }
    CHECK(bad < 0, "Allreduce(IN_PLACE) MAX 1M doubles: element %d wrong", bad);
    if (rank == 0 && getenv("COLL_VERBOSE"))
        printf("allreduce 1M doubles: %.3f ms\n", t * 1e3);
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    rank = g_rank;
    size = g_size;

    test_barrier_bcast();
    test_predefined_reductions();
    test_minmaxloc();
    test_long_double();
    test_gather_scatter();
    test_alltoall();
    test_reduce_scatter_scan();
    test_nonblocking_coll();
    test_nonblocking_returns_at_once();
    test_user_ops();
    test_user_op_calls_library();
    test_derived_reductions();
    test_large_allreduce();
    return finish("coll");
}
