/*
 * dtype.c - derived datatypes.
 *
 * run-sizes: 1 2 3 4   (any n >= 1; messages go round a ring, to self when
 *                       n == 1)
 *
 * Covers: Type_contiguous, Type_vector (a matrix column), Type_indexed,
 * Type_create_struct (struct {int; double; char[3]}), Type_create_resized,
 * Type_commit, Type_size, Type_get_extent, Type_get_true_extent,
 * Type_get_name / Type_set_name, Type_get_envelope (combiners and counts),
 * derived-type send to contiguous receive and the reverse, Get_count /
 * Get_elements with derived types (including a partial element),
 * Type_free (also of a type still used by another type), Type_dup.
 */
#include "common.h"
#include <stddef.h>

static int rank, size, left, right;

/* Irecv from left, Send to right, Wait; returns the receive status. */
static MPI_Status ring(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf,
                       int rcount, MPI_Datatype rtype, int tag)
{
    MPI_Request rq;
    MPI_Status st;
    MPI_Irecv(rbuf, rcount, rtype, left, tag, MPI_COMM_WORLD, &rq);
    MPI_Send(sbuf, scount, stype, right, tag, MPI_COMM_WORLD);
    MPI_Wait(&rq, &st);
    return st;
}

static void check_envelope(MPI_Datatype t, int comb, int ni, int na, int nd, const char *what)
{
    int i = -1, a = -1, d = -1, c = -1;
    MPI_Type_get_envelope(t, &i, &a, &d, &c);
    CHECK(c == comb && i == ni && a == na && d == nd,
          "%s envelope: combiner %d ints %d addrs %d types %d; expected %d %d %d %d", what, c,
          i, a, d, comb, ni, na, nd);
}

static void check_geometry(MPI_Datatype t, int esize, MPI_Aint elb, MPI_Aint eext,
                           MPI_Aint etlb, MPI_Aint etext, const char *what)
{
    int sz = -1;
    MPI_Aint lb = -1, ext = -1, tlb = -1, text = -1;
    MPI_Type_size(t, &sz);
    MPI_Type_get_extent(t, &lb, &ext);
    MPI_Type_get_true_extent(t, &tlb, &text);
    CHECK(sz == esize, "%s: size %d expected %d", what, sz, esize);
    CHECK(lb == elb && ext == eext, "%s: lb %ld extent %ld expected %ld %ld", what, (long)lb,
          (long)ext, (long)elb, (long)eext);
    CHECK(tlb == etlb && text == etext, "%s: true lb %ld true extent %ld expected %ld %ld",
          what, (long)tlb, (long)text, (long)etlb, (long)etext);
}

static void test_named(void)
{
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    MPI_Type_get_name(MPI_INT, name, &len);
    CHECK(strcmp(name, "MPI_INT") == 0 && len == 7, "name of MPI_INT '%s' len %d", name, len);
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(strcmp(name, "MPI_DOUBLE") == 0, "name of MPI_DOUBLE '%s'", name);
    check_envelope(MPI_INT, MPI_COMBINER_NAMED, 0, 0, 0, "MPI_INT");
    check_geometry(MPI_INT, 4, 0, 4, 0, 4, "MPI_INT");
    check_geometry(MPI_DOUBLE, 8, 0, 8, 0, 8, "MPI_DOUBLE");
    check_geometry(MPI_CHAR, 1, 0, 1, 0, 1, "MPI_CHAR");
    int sz = -1;
    MPI_Type_size(MPI_LONG_LONG, &sz);
    CHECK(sz == 8, "size of MPI_LONG_LONG %d", sz);
    MPI_Type_size(MPI_SHORT, &sz);
    CHECK(sz == 2, "size of MPI_SHORT %d", sz);
    MPI_Type_size(MPI_2INT, &sz);
    CHECK(sz == 8, "size of MPI_2INT %d", sz);
}

static void test_contiguous(void)
{
    MPI_Datatype t;
    MPI_Type_contiguous(5, MPI_INT, &t);
    MPI_Type_commit(&t);
    check_geometry(t, 20, 0, 20, 0, 20, "contiguous(5, INT)");
    check_envelope(t, MPI_COMBINER_CONTIGUOUS, 1, 0, 1, "contiguous");
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    MPI_Type_get_name(t, name, &len);
    CHECK(len == 0 && name[0] == 0, "unnamed derived type has name '%s'", name);
    MPI_Type_set_name(t, "five_ints");
    MPI_Type_get_name(t, name, &len);
    CHECK(strcmp(name, "five_ints") == 0 && len == 9, "set_name/get_name gave '%s'", name);

    int s[15], r[15];
    for (int i = 0; i < 15; i++) {
        s[i] = rank * 100 + i;
        r[i] = -1;
    }
    MPI_Status st = ring(s, 3, t, r, 15, MPI_INT, 1);
    int ok = 1;
    for (int i = 0; i < 15; i++)
        if (r[i] != left * 100 + i)
            ok = 0;
    CHECK(ok, "3 x contiguous(5) -> 15 INT data");
    int c = -1;
    MPI_Get_count(&st, MPI_INT, &c);
    CHECK(c == 15, "Get_count INT %d", c);

    /* Contiguous sender, derived receiver: 10 ints = exactly 2 elements. */
    for (int i = 0; i < 15; i++)
        r[i] = -1;
    st = ring(s, 10, MPI_INT, r, 3, t, 2);
    MPI_Get_count(&st, t, &c);
    CHECK(c == 2, "Get_count(contig5) for 10 ints: %d", c);
    MPI_Get_elements(&st, t, &c);
    CHECK(c == 10, "Get_elements(contig5) for 10 ints: %d", c);
    ok = 1;
    for (int i = 0; i < 10; i++)
        if (r[i] != left * 100 + i)
            ok = 0;
    CHECK(ok && r[10] == -1, "10 INT -> contiguous(5) data");

    /* 12 ints: not a whole number of elements. */
    for (int i = 0; i < 15; i++)
        r[i] = -1;
    st = ring(s, 12, MPI_INT, r, 3, t, 3);
    MPI_Get_count(&st, t, &c);
    CHECK(c == MPI_UNDEFINED, "Get_count(contig5) for 12 ints: %d", c);
    MPI_Get_elements(&st, t, &c);
    CHECK(c == 12, "Get_elements(contig5) for 12 ints: %d", c);
    ok = 1;
    for (int i = 0; i < 12; i++)
        if (r[i] != left * 100 + i)
            ok = 0;
    CHECK(ok && r[12] == -1, "12 INT -> contiguous(5) data");
    MPI_Type_free(&t);
    CHECK(t == MPI_DATATYPE_NULL, "Type_free did not set MPI_DATATYPE_NULL");
}

enum { ROWS = 6, COLS = 5 };

static void test_vector(void)
{
    MPI_Datatype col, col1;
    MPI_Type_vector(ROWS, 1, COLS, MPI_DOUBLE, &col);
    MPI_Type_commit(&col);
    MPI_Aint ext = ((ROWS - 1) * COLS + 1) * sizeof(double);
    check_geometry(col, ROWS * 8, 0, ext, 0, ext, "vector column");
    check_envelope(col, MPI_COMBINER_VECTOR, 3, 0, 1, "vector");

    double m[ROWS][COLS], got[ROWS][COLS], v[ROWS * 2];
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            m[i][j] = rank * 1000 + i * 10 + j;

    /* Column 2 -> contiguous doubles. */
    for (int i = 0; i < ROWS * 2; i++)
        v[i] = -1;
    MPI_Status st = ring(&m[0][2], 1, col, v, ROWS * 2, MPI_DOUBLE, 10);
    int ok = 1;
    for (int i = 0; i < ROWS; i++)
        if (v[i] != left * 1000 + i * 10 + 2)
            ok = 0;
    CHECK(ok && v[ROWS] == -1, "column -> contiguous data");
    int c = -1;
    MPI_Get_count(&st, MPI_DOUBLE, &c);
    CHECK(c == ROWS, "Get_count(DOUBLE) for a column: %d", c);

    /* Contiguous -> column 4 of a matrix; other entries untouched. */
    double sv[ROWS];
    for (int i = 0; i < ROWS; i++)
        sv[i] = rank + 0.25 * i;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            got[i][j] = -5;
    st = ring(sv, ROWS, MPI_DOUBLE, &got[0][4], 1, col, 11);
    ok = 1;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) {
            double e = j == 4 ? left + 0.25 * i : -5;
            if (got[i][j] != e)
                ok = 0;
        }
    CHECK(ok, "contiguous -> column data / untouched entries");
    MPI_Get_count(&st, col, &c);
    CHECK(c == 1, "Get_count(col) %d", c);
    MPI_Get_elements(&st, col, &c);
    CHECK(c == ROWS, "Get_elements(col) %d", c);

    /* Resized column (extent one double): two adjacent columns. */
    MPI_Type_create_resized(col, 0, sizeof(double), &col1);
    MPI_Type_commit(&col1);
    check_geometry(col1, ROWS * 8, 0, 8, 0, ext, "resized column");
    check_envelope(col1, MPI_COMBINER_RESIZED, 0, 2, 1, "resized");
    for (int i = 0; i < ROWS * 2; i++)
        v[i] = -1;
    st = ring(&m[0][1], 2, col1, v, ROWS * 2, MPI_DOUBLE, 12);
    ok = 1;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ROWS; i++)
            if (v[k * ROWS + i] != left * 1000 + i * 10 + 1 + k)
                ok = 0;
    CHECK(ok, "2 x resized column -> contiguous data");

    /* Column to column (vector to vector). */
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            got[i][j] = -5;
    ring(&m[0][0], 2, col1, &got[0][3], 2, col1, 13);
    ok = 1;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++) {
            double e = j == 3 ? left * 1000 + i * 10 : j == 4 ? left * 1000 + i * 10 + 1 : -5;
            if (got[i][j] != e)
                ok = 0;
        }
    CHECK(ok, "columns -> columns");

    /* Partial element: 9 doubles into 2 columns. */
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            got[i][j] = -5;
    double nine[9];
    for (int i = 0; i < 9; i++)
        nine[i] = rank * 50 + i;
    st = ring(nine, 9, MPI_DOUBLE, &got[0][0], 2, col1, 14);
    MPI_Get_count(&st, col1, &c);
    CHECK(c == MPI_UNDEFINED, "Get_count(col) for 9 doubles: %d", c);
    MPI_Get_elements(&st, col1, &c);
    CHECK(c == 9, "Get_elements(col) for 9 doubles: %d", c);
    MPI_Count cx = -1;
    MPI_Get_elements_x(&st, col1, &cx);
    CHECK(cx == 9, "Get_elements_x(col) for 9 doubles: %lld", (long long)cx);
    ok = 1;
    for (int i = 0; i < ROWS; i++)
        if (got[i][0] != left * 50 + i)
            ok = 0;
    for (int i = 0; i < 3; i++)
        if (got[i][1] != left * 50 + ROWS + i)
            ok = 0;
    for (int i = 3; i < ROWS; i++)
        if (got[i][1] != -5)
            ok = 0;
    CHECK(ok, "partial receive into columns");

    /* Type_dup. */
    MPI_Datatype cdup;
    MPI_Type_dup(col, &cdup);
    check_geometry(cdup, ROWS * 8, 0, ext, 0, ext, "dup of column");
    check_envelope(cdup, MPI_COMBINER_DUP, 0, 0, 1, "dup");
    for (int i = 0; i < ROWS * 2; i++)
        v[i] = -1;
    ring(&m[0][3], 1, cdup, v, ROWS, MPI_DOUBLE, 15);
    ok = 1;
    for (int i = 0; i < ROWS; i++)
        if (v[i] != left * 1000 + i * 10 + 3)
            ok = 0;
    CHECK(ok, "send with Type_dup'd column");
    MPI_Type_free(&cdup);

    /* Freeing a type that another type was built from keeps the latter valid. */
    MPI_Datatype two;
    MPI_Type_contiguous(2, col1, &two);
    MPI_Type_free(&col1);
    MPI_Type_free(&col);
    MPI_Type_commit(&two);
    check_geometry(two, 2 * ROWS * 8, 0, 16, 0, ext + 8, "contiguous(2, resized column)");
    for (int i = 0; i < ROWS * 2; i++)
        v[i] = -1;
    ring(&m[0][2], 1, two, v, ROWS * 2, MPI_DOUBLE, 16);
    ok = 1;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ROWS; i++)
            if (v[k * ROWS + i] != left * 1000 + i * 10 + 2 + k)
                ok = 0;
    CHECK(ok, "type built from freed types");
    MPI_Type_free(&two);
}

static void test_indexed(void)
{
    int bl[3] = {2, 1, 3}, disp[3] = {0, 4, 7};
    MPI_Datatype t;
    MPI_Type_indexed(3, bl, disp, MPI_INT, &t);
    MPI_Type_commit(&t);
    check_geometry(t, 24, 0, 40, 0, 40, "indexed");
    check_envelope(t, MPI_COMBINER_INDEXED, 7, 0, 1, "indexed");

    int a[20], r[20];
    for (int i = 0; i < 20; i++)
        a[i] = rank * 100 + i;
    for (int i = 0; i < 20; i++)
        r[i] = -1;
    /* Two elements: second starts at extent 40 bytes = a[10]. */
    MPI_Status st = ring(a, 2, t, r, 20, MPI_INT, 20);
    int idx[12] = {0, 1, 4, 7, 8, 9, 10, 11, 14, 17, 18, 19};
    int ok = 1;
    for (int i = 0; i < 12; i++)
        if (r[i] != left * 100 + idx[i])
            ok = 0;
    CHECK(ok && r[12] == -1, "indexed -> contiguous data");
    int c = -1;
    MPI_Get_count(&st, MPI_INT, &c);
    CHECK(c == 12, "indexed Get_count(INT) %d", c);

    /* Contiguous -> indexed (scatter into the holes pattern). */
    for (int i = 0; i < 20; i++)
        r[i] = -1;
    st = ring(a, 6, MPI_INT, r, 1, t, 21);
    ok = 1;
    int pos = 0;
    for (int i = 0; i < 10; i++) {
        int in = (i <= 1) || i == 4 || (i >= 7 && i <= 9);
        if (in) {
            if (r[i] != left * 100 + pos)
                ok = 0;
            pos++;
        } else if (r[i] != -1) {
            ok = 0;
        }
    }
    CHECK(ok, "contiguous -> indexed data");
    MPI_Get_count(&st, t, &c);
    CHECK(c == 1, "Get_count(indexed) %d", c);
    MPI_Get_elements(&st, t, &c);
    CHECK(c == 6, "Get_elements(indexed) %d", c);

    /* Indexed with a non-zero first displacement: lb moves. */
    int bl2[2] = {1, 1}, disp2[2] = {3, 1};
    MPI_Datatype t2;
    MPI_Type_indexed(2, bl2, disp2, MPI_INT, &t2);
    MPI_Type_commit(&t2);
    check_geometry(t2, 8, 4, 12, 4, 12, "indexed {3,1}");
    for (int i = 0; i < 20; i++)
        r[i] = -1;
    ring(a, 1, t2, r, 2, MPI_INT, 22);
    CHECK(r[0] == left * 100 + 3 && r[1] == left * 100 + 1,
          "indexed order follows the typemap: %d %d", r[0], r[1]);
    MPI_Type_free(&t2);
    MPI_Type_free(&t);
}

struct rec {
    int a;
    double b;
    char c[3];
};

static void test_struct(void)
{
    int bl[3] = {1, 1, 3};
    MPI_Aint disp[3] = {offsetof(struct rec, a), offsetof(struct rec, b),
                        offsetof(struct rec, c)};
    MPI_Datatype types[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};
    MPI_Datatype t, tr;
    MPI_Type_create_struct(3, bl, disp, types, &t);
    MPI_Type_commit(&t);
    MPI_Aint true_ext = offsetof(struct rec, c) + 3;
    /* Extent is padded up to the alignment of double, i.e. sizeof(struct). */
    check_geometry(t, 4 + 8 + 3, 0, (MPI_Aint)sizeof(struct rec), 0, true_ext, "struct");
    check_envelope(t, MPI_COMBINER_STRUCT, 4, 3, 3, "struct");

    /* Resized to sizeof(struct) explicitly (portable idiom). */
    MPI_Type_create_resized(t, 0, sizeof(struct rec), &tr);
    MPI_Type_commit(&tr);
    check_geometry(tr, 15, 0, (MPI_Aint)sizeof(struct rec), 0, true_ext, "resized struct");

    enum { N = 4 };
    struct rec s[N], r[N];
    for (int i = 0; i < N; i++) {
        memset(&s[i], 0, sizeof s[i]);
        s[i].a = rank * 10 + i;
        s[i].b = rank + i * 0.125;
        s[i].c[0] = (char)('a' + rank);
        s[i].c[1] = (char)('0' + i);
        s[i].c[2] = 'z';
    }
    memset(r, 0x77, sizeof r);
    MPI_Status st = ring(s, N, tr, r, N, tr, 30);
    int ok = 1;
    for (int i = 0; i < N; i++)
        if (r[i].a != left * 10 + i || r[i].b != left + i * 0.125 ||
            r[i].c[0] != (char)('a' + left) || r[i].c[1] != (char)('0' + i) ||
            r[i].c[2] != 'z')
            ok = 0;
    CHECK(ok, "array of structs");
    int c = -1;
    MPI_Get_count(&st, tr, &c);
    CHECK(c == N, "Get_count(struct) %d", c);
    MPI_Get_elements(&st, tr, &c);
    CHECK(c == N * 5, "Get_elements(struct) %d (basic elements)", c);

    /* Struct -> bytes: the packed signature is int, double, 3 chars. */
    unsigned char bytes[64];
    memset(bytes, 0, sizeof bytes);
    st = ring(s, 1, t, bytes, 64, MPI_BYTE, 31);
    MPI_Get_count(&st, MPI_BYTE, &c);
    CHECK(c == 15, "struct as bytes: %d bytes", c);
    int ia;
    double db;
    memcpy(&ia, bytes, 4);
    memcpy(&db, bytes + 4, 8);
    CHECK(ia == left * 10 && db == left && bytes[12] == (unsigned char)('a' + left) &&
              bytes[13] == '0' && bytes[14] == 'z',
          "struct packed as bytes: %d %g %c%c%c", ia, db, bytes[12], bytes[13], bytes[14]);

    /* Bytes -> struct (reverse). */
    unsigned char packed[15];
    int pa = rank + 500;
    double pb = rank * 2.5;
    memcpy(packed, &pa, 4);
    memcpy(packed + 4, &pb, 8);
    packed[12] = 'x';
    packed[13] = 'y';
    packed[14] = (unsigned char)('0' + rank);
    struct rec one;
    memset(&one, 0, sizeof one);
    ring(packed, 15, MPI_BYTE, &one, 1, t, 32);
    CHECK(one.a == left + 500 && one.b == left * 2.5 && one.c[0] == 'x' && one.c[1] == 'y' &&
              one.c[2] == (char)('0' + left),
          "bytes -> struct: %d %g", one.a, one.b);

    MPI_Type_free(&tr);
    MPI_Type_free(&t);
}

static void test_resized_lb(void)
{
    MPI_Datatype t;
    MPI_Type_create_resized(MPI_INT, -8, 100, &t);
    MPI_Type_commit(&t);
    check_geometry(t, 4, -8, 100, 0, 4, "resized INT(lb -8, extent 100)");
    MPI_Type_free(&t);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    rank = g_rank;
    size = g_size;
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    test_named();
    test_contiguous();
    test_vector();
    test_indexed();
    test_struct();
    test_resized_lb();
    return finish("dtype");
}
