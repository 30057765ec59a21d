/*
 * p2p.c - point-to-point semantics.
 *
 * run-sizes: 1 2 3 4   (any n >= 1; with n == 1 the ring partner is the
 *                       process itself, the pairwise-blocking parts and the
 *                       ANY_SOURCE fan-in are skipped)
 *
 * Covers: Send/Recv of 0 B .. 4 MiB with data checks, Ssend, Rsend (after a
 * barrier that guarantees the receive is posted), Isend/Irecv/Issend/Irsend,
 * Wait/Waitall/Waitany/Waitsome/Test/Testall/Testany/Testsome, ANY_SOURCE /
 * ANY_TAG with status checks, Get_count/Get_elements, MPI_PROC_NULL in every
 * role, Sendrecv and Sendrecv_replace in a ring, MPI 4.0's Isendrecv and
 * Isendrecv_replace (Wait, Test, Waitall, freed while active, PROC_NULL),
 * Probe/Iprobe then Recv,
 * non-overtaking order, Request_free on an active send, Request_get_status,
 * Cancel of an unmatched Irecv, Wait on MPI_REQUEST_NULL, Waitall with
 * MPI_STATUSES_IGNORE, persistent Send_init/Recv_init with Start/Startall,
 * a matched probe's message out of reach of later receives (Mprobe, then
 * Recv of the same source and tag gets the next message; Improbe/Imrecv of
 * a rendezvous-sized message; Mrecv truncation), and a datatype freed while
 * a receive and a persistent receive still use it.
 */
#include "common.h"

static int rank, size, left, right;

#define CHECK_STATUS(st, src, tg, nbytes)                                      \
    do {                                                                       \
        int cnt_ = -7;                                                         \
        MPI_Get_count(&(st), MPI_BYTE, &cnt_);                                 \
        CHECK((st).MPI_SOURCE == (src), "status source %d expected %d",        \
              (st).MPI_SOURCE, (src));                                         \
        CHECK((st).MPI_TAG == (tg), "status tag %d expected %d", (st).MPI_TAG, \
              (tg));                                                           \
        CHECK(cnt_ == (int)(nbytes), "status count %d expected %d", cnt_,      \
              (int)(nbytes));                                                  \
    } while (0)

static const int sizes[] = {0, 1, 8, 1000, 65536, 1 << 20, 4 << 20};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

/* Ring: Irecv from left, blocking Send to right, Wait. Works for n == 1. */
static void test_send_recv_sizes(void)
{
    unsigned char *sbuf = malloc(4 << 20), *rbuf = malloc((4 << 20) + 16);
    for (int k = 0; k < NSIZES; k++) {
        int n = sizes[k];
        MPI_Request req;
        MPI_Status st;
        fill_pattern(sbuf, n, rank * 100 + k);
        memset(rbuf, 0xEE, n + 16);
        MPI_Irecv(rbuf, n, MPI_BYTE, left, 10 + k, MPI_COMM_WORLD, &req);
        MPI_Send(sbuf, n, MPI_BYTE, right, 10 + k, MPI_COMM_WORLD);
        MPI_Wait(&req, &st);
        CHECK_STATUS(st, left, 10 + k, n);
        long bad = check_pattern(rbuf, n, left * 100 + k);
        CHECK(bad < 0, "ring send/recv size %d: mismatch at byte %ld", n, bad);
        CHECK(rbuf[n] == 0xEE, "ring size %d: wrote past end of receive", n);
    }

    /* Plain blocking pairs (0<->1, 2<->3): lower sends first. */
    int partner = rank ^ 1;
    if (partner < size) {
        for (int k = 0; k < NSIZES; k++) {
            int n = sizes[k];
            MPI_Status st;
            fill_pattern(sbuf, n, rank * 100 + k + 50);
            memset(rbuf, 0, n);
            if (rank < partner) {
                MPI_Send(sbuf, n, MPI_BYTE, partner, 20 + k, MPI_COMM_WORLD);
                MPI_Recv(rbuf, n, MPI_BYTE, partner, 20 + k, MPI_COMM_WORLD, &st);
            } else {
                MPI_Recv(rbuf, n, MPI_BYTE, partner, 20 + k, MPI_COMM_WORLD, &st);
                MPI_Send(sbuf, n, MPI_BYTE, partner, 20 + k, MPI_COMM_WORLD);
            }
            CHECK_STATUS(st, partner, 20 + k, n);
            long bad = check_pattern(rbuf, n, partner * 100 + k + 50);
            CHECK(bad < 0, "pair send/recv size %d: mismatch at byte %ld", n, bad);
        }
        /* Typed: 1000 doubles, received into a larger buffer. */
        double dsend[1000], drecv[1200];
        for (int i = 0; i < 1000; i++)
            dsend[i] = rank * 1e6 + i * 0.5;
        MPI_Status st;
        if (rank < partner) {
            MPI_Send(dsend, 1000, MPI_DOUBLE, partner, 30, MPI_COMM_WORLD);
            MPI_Recv(drecv, 1200, MPI_DOUBLE, partner, 30, MPI_COMM_WORLD, &st);
        } else {
            MPI_Recv(drecv, 1200, MPI_DOUBLE, partner, 30, MPI_COMM_WORLD, &st);
            MPI_Send(dsend, 1000, MPI_DOUBLE, partner, 30, MPI_COMM_WORLD);
        }
        int cnt = -1;
        MPI_Get_count(&st, MPI_DOUBLE, &cnt);
        CHECK(cnt == 1000, "double count %d", cnt);
        int ok = 1;
        for (int i = 0; i < 1000; i++)
            if (drecv[i] != partner * 1e6 + i * 0.5)
                ok = 0;
        CHECK(ok, "typed double data mismatch");
    }
    free(sbuf);
    free(rbuf);
}

static void test_sync_ready(void)
{
    int sizes2[] = {0, 4, 100000};
    unsigned char *sbuf = malloc(100000), *rbuf = malloc(100000);
    for (int k = 0; k < 3; k++) {
        int n = sizes2[k];
        MPI_Request req;
        MPI_Status st;
        /* Ssend: receive is posted first, so this also works with n == 1. */
        fill_pattern(sbuf, n, rank + 7 * k);
        MPI_Irecv(rbuf, n, MPI_BYTE, left, 40 + k, MPI_COMM_WORLD, &req);
        MPI_Ssend(sbuf, n, MPI_BYTE, right, 40 + k, MPI_COMM_WORLD);
        MPI_Wait(&req, &st);
        CHECK_STATUS(st, left, 40 + k, n);
        CHECK(check_pattern(rbuf, n, left + 7 * k) < 0, "Ssend data size %d", n);

        /* Rsend: the barrier guarantees every receive is posted. */
        fill_pattern(sbuf, n, rank + 9 * k);
        MPI_Irecv(rbuf, n, MPI_BYTE, left, 50 + k, MPI_COMM_WORLD, &req);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Rsend(sbuf, n, MPI_BYTE, right, 50 + k, MPI_COMM_WORLD);
        MPI_Wait(&req, &st);
        CHECK_STATUS(st, left, 50 + k, n);
        CHECK(check_pattern(rbuf, n, left + 9 * k) < 0, "Rsend data size %d", n);
    }

    /* Pairwise blocking Ssend/Recv. */
    int partner = rank ^ 1;
    if (partner < size) {
        int v = rank * 3 + 1, w = -1;
        MPI_Status st;
        if (rank < partner) {
            MPI_Ssend(&v, 1, MPI_INT, partner, 55, MPI_COMM_WORLD);
            MPI_Recv(&w, 1, MPI_INT, partner, 55, MPI_COMM_WORLD, &st);
        } else {
            MPI_Recv(&w, 1, MPI_INT, partner, 55, MPI_COMM_WORLD, &st);
            MPI_Ssend(&v, 1, MPI_INT, partner, 55, MPI_COMM_WORLD);
        }
        CHECK(w == partner * 3 + 1, "pair Ssend got %d", w);
    }
    free(sbuf);
    free(rbuf);
}

static void test_nonblocking(void)
{
    enum { N = 5000 };
    int *s = malloc(N * sizeof(int)), *r = malloc(N * sizeof(int));
    MPI_Request reqs[2];
    MPI_Status sts[2];

    /* Isend / Irecv / Wait (send first, then receive). */
    for (int i = 0; i < N; i++)
        s[i] = rank * N + i;
    MPI_Isend(s, N, MPI_INT, right, 60, MPI_COMM_WORLD, &reqs[0]);
    MPI_Irecv(r, N, MPI_INT, left, 60, MPI_COMM_WORLD, &reqs[1]);
    MPI_Wait(&reqs[1], &sts[1]);
    MPI_Wait(&reqs[0], &sts[0]);
    CHECK(reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL,
          "Wait did not null the requests");
    CHECK_STATUS(sts[1], left, 60, N * (int)sizeof(int));
    int ok = 1;
    for (int i = 0; i < N; i++)
        if (r[i] != left * N + i)
            ok = 0;
    CHECK(ok, "Isend/Irecv data");

    /* Issend + Test loop. */
    for (int i = 0; i < N; i++)
        s[i] = -(rank * N + i);
    MPI_Irecv(r, N, MPI_INT, left, 61, MPI_COMM_WORLD, &reqs[1]);
    MPI_Issend(s, N, MPI_INT, right, 61, MPI_COMM_WORLD, &reqs[0]);
    int done0 = 0, done1 = 0;
    long spins = 0;
    while (!(done0 && done1)) {
        if (!done0)
            MPI_Test(&reqs[0], &done0, &sts[0]);
        if (!done1)
            MPI_Test(&reqs[1], &done1, &sts[1]);
        spins++;
    }
    CHECK(reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL,
          "Test did not null completed requests");
    CHECK_STATUS(sts[1], left, 61, N * (int)sizeof(int));
    ok = 1;
    for (int i = 0; i < N; i++)
        if (r[i] != -(left * N + i))
            ok = 0;
    CHECK(ok, "Issend data");
    /* Test on a null request: flag true, empty status. */
    MPI_Request nullreq = MPI_REQUEST_NULL;
    int flag = 0;
    MPI_Status est;
    est.MPI_SOURCE = 12345;
    est.MPI_TAG = 12345;
    MPI_Test(&nullreq, &flag, &est);
    CHECK(flag, "Test(REQUEST_NULL) flag false");
    CHECK(est.MPI_SOURCE == MPI_ANY_SOURCE && est.MPI_TAG == MPI_ANY_TAG,
          "Test(REQUEST_NULL) status src %d tag %d", est.MPI_SOURCE, est.MPI_TAG);

    /* Irsend after barrier, Waitall. */
    for (int i = 0; i < N; i++)
        s[i] = rank + i * 2;
    MPI_Irecv(r, N, MPI_INT, left, 62, MPI_COMM_WORLD, &reqs[1]);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Irsend(s, N, MPI_INT, right, 62, MPI_COMM_WORLD, &reqs[0]);
    MPI_Waitall(2, reqs, sts);
    CHECK_STATUS(sts[1], left, 62, N * (int)sizeof(int));
    ok = 1;
    for (int i = 0; i < N; i++)
        if (r[i] != left + i * 2)
            ok = 0;
    CHECK(ok, "Irsend data");

    /* Waitall with MPI_STATUSES_IGNORE, and Testall loop. */
    for (int i = 0; i < N; i++)
        s[i] = rank * 7 + i;
    MPI_Irecv(r, N, MPI_INT, left, 63, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(s, N, MPI_INT, right, 63, MPI_COMM_WORLD, &reqs[1]);
    MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
    CHECK(reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL,
          "Waitall did not null requests");
    ok = 1;
    for (int i = 0; i < N; i++)
        if (r[i] != left * 7 + i)
            ok = 0;
    CHECK(ok, "Waitall(STATUSES_IGNORE) data");

    MPI_Irecv(r, N, MPI_INT, left, 64, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(s, N, MPI_INT, right, 64, MPI_COMM_WORLD, &reqs[1]);
    flag = 0;
    while (!flag)
        MPI_Testall(2, reqs, &flag, sts);
    CHECK(reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL,
          "Testall did not null requests");
    CHECK_STATUS(sts[0], left, 64, N * (int)sizeof(int));
    ok = 1;
    for (int i = 0; i < N; i++)
        if (r[i] != left * 7 + i)
            ok = 0;
    CHECK(ok, "Testall data");
    /* Wait with MPI_STATUS_IGNORE. */
    MPI_Irecv(r, 1, MPI_INT, left, 65, MPI_COMM_WORLD, &reqs[0]);
    MPI_Send(s, 1, MPI_INT, right, 65, MPI_COMM_WORLD);
    MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    CHECK(r[0] == left * 7, "Wait(STATUS_IGNORE) data %d", r[0]);
    (void)spins;
    free(s);
    free(r);
}

/* Multi-completion: K receives with distinct tags, sends in reverse order. */
enum { K = 8, KLEN = 300 };

static void post_k(int tagbase, int rbuf[K][KLEN], int sbuf[K][KLEN], MPI_Request *rr,
                   MPI_Request *sr)
{
    for (int t = 0; t < K; t++) {
        for (int i = 0; i < KLEN; i++)
            sbuf[t][i] = rank * 10000 + t * 1000 + i;
        memset(rbuf[t], 0, sizeof rbuf[t]);
        MPI_Irecv(rbuf[t], KLEN, MPI_INT, left, tagbase + t, MPI_COMM_WORLD, &rr[t]);
    }
    for (int t = K - 1; t >= 0; t--)
        MPI_Isend(sbuf[t], KLEN, MPI_INT, right, tagbase + t, MPI_COMM_WORLD, &sr[t]);
}

static int check_k(int rbuf[K][KLEN], int t)
{
    for (int i = 0; i < KLEN; i++)
        if (rbuf[t][i] != left * 10000 + t * 1000 + i)
            return 0;
    return 1;
}

static void test_multi_completion(void)
{
    static int rbuf[K][KLEN], sbuf[K][KLEN];
    MPI_Request rr[K], sr[K];
    MPI_Status st, sts[K];
    int seen[K], idx, flag, outcount, indices[K];

    /* Waitany */
    post_k(100, rbuf, sbuf, rr, sr);
    memset(seen, 0, sizeof seen);
    for (int c = 0; c < K; c++) {
        idx = -5;
        MPI_Waitany(K, rr, &idx, &st);
        CHECK(idx >= 0 && idx < K, "Waitany index %d", idx);
        if (idx < 0 || idx >= K)
            break;
        CHECK(!seen[idx], "Waitany returned index %d twice", idx);
        seen[idx] = 1;
        CHECK(rr[idx] == MPI_REQUEST_NULL, "Waitany did not null request");
        CHECK_STATUS(st, left, 100 + idx, KLEN * (int)sizeof(int));
        CHECK(check_k(rbuf, idx), "Waitany data for tag %d", idx);
    }
    idx = -5;
    MPI_Waitany(K, rr, &idx, &st);
    CHECK(idx == MPI_UNDEFINED, "Waitany on all-null gave index %d", idx);
    MPI_Waitall(K, sr, MPI_STATUSES_IGNORE);

    /* Waitsome */
    post_k(120, rbuf, sbuf, rr, sr);
    memset(seen, 0, sizeof seen);
    int total = 0;
    while (total < K) {
        outcount = -5;
        MPI_Waitsome(K, rr, &outcount, indices, sts);
        CHECK(outcount >= 1 && outcount <= K - total, "Waitsome outcount %d", outcount);
        if (outcount < 1 || outcount > K)
            break;
        for (int j = 0; j < outcount; j++) {
            int t = indices[j];
            CHECK(t >= 0 && t < K && !seen[t], "Waitsome index %d", t);
            if (t < 0 || t >= K)
                continue;
            seen[t] = 1;
            CHECK_STATUS(sts[j], left, 120 + t, KLEN * (int)sizeof(int));
            CHECK(check_k(rbuf, t), "Waitsome data for tag %d", t);
        }
        total += outcount;
    }
    outcount = -5;
    MPI_Waitsome(K, rr, &outcount, indices, sts);
    CHECK(outcount == MPI_UNDEFINED, "Waitsome on all-null gave %d", outcount);
    MPI_Waitall(K, sr, MPI_STATUSES_IGNORE);

    /* Testany */
    post_k(140, rbuf, sbuf, rr, sr);
    memset(seen, 0, sizeof seen);
    total = 0;
    while (total < K) {
        flag = 0;
        idx = -5;
        MPI_Testany(K, rr, &idx, &flag, &st);
        if (!flag) {
            CHECK(idx == MPI_UNDEFINED, "Testany flag 0 but index %d", idx);
            continue;
        }
        CHECK(idx >= 0 && idx < K && !seen[idx], "Testany index %d", idx);
        if (idx < 0 || idx >= K)
            break;
        seen[idx] = 1;
        CHECK_STATUS(st, left, 140 + idx, KLEN * (int)sizeof(int));
        CHECK(check_k(rbuf, idx), "Testany data for tag %d", idx);
        total++;
    }
    flag = 0;
    idx = -5;
    MPI_Testany(K, rr, &idx, &flag, &st);
    CHECK(flag && idx == MPI_UNDEFINED, "Testany on all-null: flag %d index %d", flag,
          idx);
    MPI_Waitall(K, sr, MPI_STATUSES_IGNORE);

    /* Testsome */
    post_k(160, rbuf, sbuf, rr, sr);
    memset(seen, 0, sizeof seen);
    total = 0;
    while (total < K) {
        outcount = -5;
        MPI_Testsome(K, rr, &outcount, indices, sts);
        CHECK(outcount >= 0 && outcount <= K - total, "Testsome outcount %d", outcount);
        if (outcount < 0 || outcount > K)
            break;
        for (int j = 0; j < outcount; j++) {
            int t = indices[j];
            CHECK(t >= 0 && t < K && !seen[t], "Testsome index %d", t);
            if (t < 0 || t >= K)
                continue;
            seen[t] = 1;
            CHECK_STATUS(sts[j], left, 160 + t, KLEN * (int)sizeof(int));
            CHECK(check_k(rbuf, t), "Testsome data for tag %d", t);
        }
        total += outcount;
    }
    outcount = -5;
    MPI_Testsome(K, rr, &outcount, indices, sts);
    CHECK(outcount == MPI_UNDEFINED, "Testsome on all-null gave %d", outcount);
    MPI_Waitall(K, sr, MPI_STATUSES_IGNORE);
}

/* Everyone but 0 sends to 0; rank 0 receives with ANY_SOURCE/ANY_TAG. */
static void test_any_source(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (size == 1)
        return;
    if (rank == 0) {
        int seen[64] = {0};
        for (int c = 0; c < size - 1; c++) {
            int buf[16];
            MPI_Status st;
            memset(buf, 0, sizeof buf);
            MPI_Recv(buf, 16, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int src = st.MPI_SOURCE;
            CHECK(src >= 1 && src < size, "ANY_SOURCE gave source %d", src);
            if (src < 1 || src >= size)
                continue;
            CHECK(!seen[src], "source %d seen twice", src);
            seen[src] = 1;
            CHECK(st.MPI_TAG == 200 + src, "ANY_TAG gave tag %d from %d", st.MPI_TAG, src);
            int cnt = -1;
            MPI_Get_count(&st, MPI_INT, &cnt);
            CHECK(cnt == src, "count %d from source %d", cnt, src);
            for (int i = 0; i < cnt && i < 16; i++)
                CHECK(buf[i] == src * 100 + i, "ANY_SOURCE data from %d", src);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        /* ANY_SOURCE with a specific tag, posted as Irecv. */
        for (int c = 0; c < size - 1; c++) {
            int v = -1;
            MPI_Status st;
            MPI_Request rq;
            MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 250, MPI_COMM_WORLD, &rq);
            MPI_Wait(&rq, &st);
            CHECK(st.MPI_TAG == 250 && st.MPI_SOURCE >= 1 && st.MPI_SOURCE < size &&
                      v == st.MPI_SOURCE * 2,
                  "Irecv ANY_SOURCE: tag %d src %d v %d", st.MPI_TAG, st.MPI_SOURCE, v);
        }
    } else {
        int buf[16];
        for (int i = 0; i < 16; i++)
            buf[i] = rank * 100 + i;
        MPI_Send(buf, rank, MPI_INT, 0, 200 + rank, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        int v = rank * 2;
        MPI_Send(&v, 1, MPI_INT, 0, 250, MPI_COMM_WORLD);
    }
}

static void test_get_count_elements(void)
{
    int s[10], r[20];
    MPI_Request rq;
    MPI_Status st;
    for (int i = 0; i < 10; i++)
        s[i] = i;
    MPI_Irecv(r, 20, MPI_INT, left, 300, MPI_COMM_WORLD, &rq);
    MPI_Send(s, 10, MPI_INT, right, 300, MPI_COMM_WORLD);
    MPI_Wait(&rq, &st);
    int c = -1;
    MPI_Get_count(&st, MPI_INT, &c);
    CHECK(c == 10, "Get_count(INT) %d", c);
    MPI_Get_count(&st, MPI_BYTE, &c);
    CHECK(c == 40, "Get_count(BYTE) %d", c);
    MPI_Get_count(&st, MPI_SHORT, &c);
    CHECK(c == 20, "Get_count(SHORT) %d", c);
    MPI_Get_elements(&st, MPI_INT, &c);
    CHECK(c == 10, "Get_elements(INT) %d", c);
    MPI_Count cx = -1;
    MPI_Get_elements_x(&st, MPI_INT, &cx);
    CHECK(cx == 10, "Get_elements_x(INT) %lld", (long long)cx);
    /* 40 bytes is not a whole number of 3-int elements. */
    MPI_Datatype t3;
    MPI_Type_contiguous(3, MPI_INT, &t3);
    MPI_Type_commit(&t3);
    MPI_Get_count(&st, t3, &c);
    CHECK(c == MPI_UNDEFINED, "Get_count(3xINT) on 40 bytes: %d", c);
    MPI_Get_elements(&st, t3, &c);
    CHECK(c == 10, "Get_elements(3xINT) on 40 bytes: %d", c);
    MPI_Type_free(&t3);
}

/* MPICH 4.0.2 returns source 0 / tag 0 for a completed Irecv from
 * MPI_PROC_NULL (blocking Recv/Sendrecv/Probe are right); the standard
 * requires MPI_PROC_NULL / MPI_ANY_TAG, so that case uses CHECK_STD. */
static void check_procnull_status_x(MPI_Status *st, const char *what, int lenient)
{
    int c = -7;
    MPI_Get_count(st, MPI_INT, &c);
    if (lenient) {
        CHECK_STD(st->MPI_SOURCE == MPI_PROC_NULL, "%s: source %d", what, st->MPI_SOURCE);
        CHECK_STD(st->MPI_TAG == MPI_ANY_TAG, "%s: tag %d", what, st->MPI_TAG);
    } else {
        CHECK(st->MPI_SOURCE == MPI_PROC_NULL, "%s: source %d", what, st->MPI_SOURCE);
        CHECK(st->MPI_TAG == MPI_ANY_TAG, "%s: tag %d", what, st->MPI_TAG);
    }
    CHECK(c == 0, "%s: count %d", what, c);
}
#define check_procnull_status(st, what) check_procnull_status_x(st, what, 0)

static void test_proc_null(void)
{
    int buf[4] = {1, 2, 3, 4}, rb[4] = {9, 9, 9, 9};
    MPI_Status st;
    MPI_Request rq;

    MPI_Send(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD);
    MPI_Ssend(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD);
    MPI_Rsend(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD);

    memset(&st, 0x55, sizeof st);
    MPI_Recv(rb, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &st);
    check_procnull_status(&st, "Recv(PROC_NULL)");
    CHECK(rb[0] == 9 && rb[3] == 9, "Recv(PROC_NULL) modified the buffer");

    MPI_Isend(buf, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, &st);
    CHECK(rq == MPI_REQUEST_NULL, "Isend(PROC_NULL) request not nulled");

    memset(&st, 0x55, sizeof st);
    MPI_Irecv(rb, 4, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, &st);
    check_procnull_status_x(&st, "Irecv(PROC_NULL)", 1);
    CHECK(rb[0] == 9, "Irecv(PROC_NULL) modified the buffer");

    memset(&st, 0x55, sizeof st);
    MPI_Irecv(rb, 4, MPI_INT, MPI_PROC_NULL, MPI_ANY_TAG, MPI_COMM_WORLD, &rq);
    int flag = 0;
    while (!flag)
        MPI_Test(&rq, &flag, &st);
    check_procnull_status_x(&st, "Irecv(PROC_NULL)+Test", 1);

    memset(&st, 0x55, sizeof st);
    MPI_Sendrecv(buf, 4, MPI_INT, MPI_PROC_NULL, 5, rb, 4, MPI_INT, MPI_PROC_NULL, 5,
                 MPI_COMM_WORLD, &st);
    check_procnull_status(&st, "Sendrecv(PROC_NULL)");

    /* Sendrecv to a real peer but receiving from PROC_NULL. */
    memset(&st, 0x55, sizeof st);
    int v = rank;
    int tmp = -1;
    MPI_Irecv(&tmp, 1, MPI_INT, left, 6, MPI_COMM_WORLD, &rq);
    MPI_Sendrecv(&v, 1, MPI_INT, right, 6, rb, 4, MPI_INT, MPI_PROC_NULL, 6,
                 MPI_COMM_WORLD, &st);
    check_procnull_status(&st, "Sendrecv(right, PROC_NULL)");
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(tmp == left, "Sendrecv to real dest delivered %d", tmp);

    memset(&st, 0x55, sizeof st);
    MPI_Probe(MPI_PROC_NULL, 5, MPI_COMM_WORLD, &st);
    check_procnull_status(&st, "Probe(PROC_NULL)");
    flag = 0;
    memset(&st, 0x55, sizeof st);
    MPI_Iprobe(MPI_PROC_NULL, 5, MPI_COMM_WORLD, &flag, &st);
    CHECK(flag, "Iprobe(PROC_NULL) flag false");
    check_procnull_status(&st, "Iprobe(PROC_NULL)");
}

static void test_sendrecv_ring(void)
{
    enum { N = 20000 };
    int *s = malloc(N * sizeof(int)), *r = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++)
        s[i] = rank * 3 + i;
    MPI_Status st;
    MPI_Sendrecv(s, N, MPI_INT, right, 400, r, N, MPI_INT, left, 400, MPI_COMM_WORLD, &st);
    CHECK_STATUS(st, left, 400, N * (int)sizeof(int));
    int ok = 1;
    for (int i = 0; i < N; i++)
        if (r[i] != left * 3 + i)
            ok = 0;
    CHECK(ok, "Sendrecv data");

    /* Sendrecv_replace: the buffer travels once round the ring. */
    for (int i = 0; i < N; i++)
        r[i] = rank * 5 + i;
    for (int step = 0; step < size; step++) {
        MPI_Sendrecv_replace(r, N, MPI_INT, right, 401, left, 401, MPI_COMM_WORLD, &st);
        CHECK_STATUS(st, left, 401, N * (int)sizeof(int));
        int origin = ((rank - step - 1) % size + size) % size;
        ok = 1;
        for (int i = 0; i < N; i++)
            if (r[i] != origin * 5 + i)
                ok = 0;
        CHECK(ok, "Sendrecv_replace step %d data", step);
    }
    /* Small replace with ANY_SOURCE. */
    int v = rank + 1000;
    MPI_Sendrecv_replace(&v, 1, MPI_INT, right, 402, MPI_ANY_SOURCE, 402, MPI_COMM_WORLD,
                         &st);
    CHECK(v == left + 1000 && st.MPI_SOURCE == left, "Sendrecv_replace ANY_SOURCE %d/%d",
          v, st.MPI_SOURCE);
    free(s);
    free(r);
}

static void test_probe(void)
{
    int lens[3] = {0, 17, 70000};
    for (int k = 0; k < 3; k++) {
        int n = lens[k];
        int *s = malloc((n + 1) * sizeof(int));
        for (int i = 0; i < n; i++)
            s[i] = rank * 11 + i;
        MPI_Request sr;
        MPI_Isend(s, n, MPI_INT, right, 500 + k, MPI_COMM_WORLD, &sr);

        MPI_Status st;
        int cnt = -1;
        if (k % 2 == 0) {
            MPI_Probe(left, 500 + k, MPI_COMM_WORLD, &st);
        } else {
            int flag = 0;
            while (!flag)
                MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        }
        CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 500 + k, "probe src %d tag %d",
              st.MPI_SOURCE, st.MPI_TAG);
        MPI_Get_count(&st, MPI_INT, &cnt);
        CHECK(cnt == n, "probed count %d expected %d", cnt, n);
        if (cnt < 0 || cnt > n)
            cnt = n;
        int *r = malloc((cnt + 1) * sizeof(int));
        MPI_Status st2;
        MPI_Recv(r, cnt, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st2);
        CHECK_STATUS(st2, left, 500 + k, n * (int)sizeof(int));
        int ok = 1;
        for (int i = 0; i < cnt; i++)
            if (r[i] != left * 11 + i)
                ok = 0;
        CHECK(ok, "probe+recv data, len %d", n);
        MPI_Wait(&sr, MPI_STATUS_IGNORE);
        free(r);
        free(s);
    }
    /* Iprobe for something that is never sent. */
    int flag = 1;
    MPI_Status st;
    MPI_Iprobe(left, 599, MPI_COMM_WORLD, &flag, &st);
    CHECK(flag == 0, "Iprobe found a message that was never sent");
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_ordering(void)
{
    enum { M = 100 };
    int sv[M], rv[M];
    MPI_Request sr[M];
    /* Mix of eager-size and one large message in the stream. */
    int *big = malloc(200000 * sizeof(int)), *bigr = malloc(200000 * sizeof(int));
    for (int i = 0; i < 200000; i++)
        big[i] = rank + i;
    for (int i = 0; i < M; i++) {
        sv[i] = rank * 1000 + i;
        if (i == 50)
            MPI_Isend(big, 200000, MPI_INT, right, 600, MPI_COMM_WORLD, &sr[i]);
        else
            MPI_Isend(&sv[i], 1, MPI_INT, right, 600, MPI_COMM_WORLD, &sr[i]);
    }
    int ok = 1;
    for (int i = 0; i < M; i++) {
        MPI_Status st;
        if (i == 50) {
            MPI_Recv(bigr, 200000, MPI_INT, left, 600, MPI_COMM_WORLD, &st);
            int c;
            MPI_Get_count(&st, MPI_INT, &c);
            if (c != 200000 || bigr[0] != left || bigr[199999] != left + 199999)
                ok = 0;
        } else {
            rv[i] = -1;
            MPI_Recv(&rv[i], 1, MPI_INT, left, 600, MPI_COMM_WORLD, &st);
            int c;
            MPI_Get_count(&st, MPI_INT, &c);
            if (c != 1 || rv[i] != left * 1000 + i) {
                if (ok)
                    fprintf(stderr, "rank %d: message %d got %d (count %d)\n", rank, i,
                            rv[i], c);
                ok = 0;
            }
        }
    }
    CHECK(ok, "messages overtook each other");
    MPI_Waitall(M, sr, MPI_STATUSES_IGNORE);

    /* Blocking sends to self-ring + ANY_SOURCE receive also in order. */
    for (int i = 0; i < M; i++)
        MPI_Isend(&sv[i], 1, MPI_INT, right, 601, MPI_COMM_WORLD, &sr[i]);
    ok = 1;
    for (int i = 0; i < M; i++) {
        int v = -1;
        MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 601, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (v != left * 1000 + i)
            ok = 0;
    }
    CHECK(ok, "ANY_SOURCE stream out of order");
    MPI_Waitall(M, sr, MPI_STATUSES_IGNORE);
    free(big);
    free(bigr);
}

static void test_request_free_and_status(void)
{
    /* Request_free on an active send; the receive still gets the data. */
    enum { N = 100000 };
    int *s = malloc(N * sizeof(int)), *r = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++)
        s[i] = rank ^ i;
    MPI_Request rq, sq;
    MPI_Irecv(r, N, MPI_INT, left, 700, MPI_COMM_WORLD, &rq);
    MPI_Isend(s, N, MPI_INT, right, 700, MPI_COMM_WORLD, &sq);
    MPI_Request_free(&sq);
    CHECK(sq == MPI_REQUEST_NULL, "Request_free did not null the handle");
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    int ok = 1;
    for (int i = 0; i < N; i++)
        if (r[i] != (left ^ i))
            ok = 0;
    CHECK(ok, "data after Request_free on the send");
    /* Keep s alive until everybody has received. */
    MPI_Barrier(MPI_COMM_WORLD);

    /* Request_get_status does not free the request. */
    int v = rank + 77, w = -1, flag = 0;
    MPI_Status st;
    MPI_Irecv(&w, 1, MPI_INT, left, 701, MPI_COMM_WORLD, &rq);
    MPI_Isend(&v, 1, MPI_INT, right, 701, MPI_COMM_WORLD, &sq);
    while (!flag)
        MPI_Request_get_status(rq, &flag, &st);
    CHECK(rq != MPI_REQUEST_NULL, "Request_get_status freed the request");
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 701, "get_status src %d tag %d",
          st.MPI_SOURCE, st.MPI_TAG);
    CHECK(w == left + 77, "get_status data %d", w);
    flag = 0;
    MPI_Request_get_status(rq, &flag, &st);
    CHECK(flag, "second Request_get_status flag false");
    MPI_Status st2;
    MPI_Wait(&rq, &st2);
    CHECK(rq == MPI_REQUEST_NULL && st2.MPI_SOURCE == left && st2.MPI_TAG == 701,
          "Wait after get_status: src %d tag %d", st2.MPI_SOURCE, st2.MPI_TAG);
    MPI_Wait(&sq, MPI_STATUS_IGNORE);
    flag = 0;
    MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st);
    CHECK(flag && st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,
          "get_status(REQUEST_NULL): flag %d src %d tag %d", flag, st.MPI_SOURCE,
          st.MPI_TAG);
    free(s);
    free(r);
}

static void test_cancel_and_null(void)
{
    int buf = -1;
    MPI_Request rq;
    MPI_Status st;
    MPI_Irecv(&buf, 1, MPI_INT, left, 799, MPI_COMM_WORLD, &rq);
    MPI_Cancel(&rq);
    MPI_Wait(&rq, &st);
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "cancelled Irecv: Test_cancelled false");
    CHECK(rq == MPI_REQUEST_NULL, "Wait on cancelled request did not null it");
    CHECK(buf == -1, "cancelled receive wrote the buffer");

    /* Same with ANY_SOURCE. */
    MPI_Irecv(&buf, 1, MPI_INT, MPI_ANY_SOURCE, 798, MPI_COMM_WORLD, &rq);
    MPI_Cancel(&rq);
    MPI_Wait(&rq, &st);
    cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "cancelled ANY_SOURCE Irecv: Test_cancelled false");

    /* A completed receive is not cancelled. */
    int v = 3;
    MPI_Irecv(&buf, 1, MPI_INT, left, 797, MPI_COMM_WORLD, &rq);
    MPI_Send(&v, 1, MPI_INT, right, 797, MPI_COMM_WORLD);
    MPI_Wait(&rq, &st);
    cancelled = 1;
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(!cancelled, "completed receive reported cancelled");

    /* Wait on MPI_REQUEST_NULL returns an empty status. */
    MPI_Request nr = MPI_REQUEST_NULL;
    memset(&st, 0x55, sizeof st);
    MPI_Wait(&nr, &st);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE, "empty status source %d", st.MPI_SOURCE);
    CHECK(st.MPI_TAG == MPI_ANY_TAG, "empty status tag %d", st.MPI_TAG);
    int c = -7;
    MPI_Get_count(&st, MPI_INT, &c);
    CHECK(c == 0, "empty status count %d", c);
    cancelled = 1;
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(!cancelled, "empty status reports cancelled");

    /* Waitall over only null requests. */
    MPI_Request nrs[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status sts[3];
    MPI_Waitall(3, nrs, sts);
    CHECK(sts[1].MPI_SOURCE == MPI_ANY_SOURCE && sts[1].MPI_TAG == MPI_ANY_TAG,
          "Waitall on null requests: src %d tag %d", sts[1].MPI_SOURCE, sts[1].MPI_TAG);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_persistent(void)
{
    enum { N = 3000 };
    int *s = malloc(N * sizeof(int)), *r = malloc(N * sizeof(int));
    MPI_Request reqs[2];
    MPI_Status sts[2];
    MPI_Recv_init(r, N, MPI_INT, left, 900, MPI_COMM_WORLD, &reqs[0]);
    MPI_Send_init(s, N, MPI_INT, right, 900, MPI_COMM_WORLD, &reqs[1]);
    for (int it = 0; it < 10; it++) {
        for (int i = 0; i < N; i++)
            s[i] = rank * 100000 + it * 1000 + i;
        memset(r, 0, N * sizeof(int));
        if (it % 2 == 0) {
            MPI_Startall(2, reqs);
        } else {
            MPI_Start(&reqs[0]);
            MPI_Start(&reqs[1]);
        }
        if (it % 3 == 0) {
            MPI_Waitall(2, reqs, sts);
        } else {
            int flag = 0;
            while (!flag)
                MPI_Testall(2, reqs, &flag, sts);
        }
        CHECK(reqs[0] != MPI_REQUEST_NULL && reqs[1] != MPI_REQUEST_NULL,
              "persistent request nulled by completion (iteration %d)", it);
        CHECK_STATUS(sts[0], left, 900, N * (int)sizeof(int));
        int ok = 1;
        for (int i = 0; i < N; i++)
            if (r[i] != left * 100000 + it * 1000 + i)
                ok = 0;
        CHECK(ok, "persistent iteration %d data", it);
    }
    /* Waiting on an inactive persistent request returns immediately. */
    MPI_Status est;
    MPI_Wait(&reqs[0], &est);
    CHECK(reqs[0] != MPI_REQUEST_NULL, "Wait on inactive persistent request nulled it");
    CHECK(est.MPI_SOURCE == MPI_ANY_SOURCE && est.MPI_TAG == MPI_ANY_TAG,
          "inactive persistent: src %d tag %d", est.MPI_SOURCE, est.MPI_TAG);
    MPI_Request_free(&reqs[0]);
    MPI_Request_free(&reqs[1]);
    CHECK(reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL,
          "Request_free on persistent requests");

    /* Persistent synchronous send. */
    MPI_Request q[2];
    int v = 0, w = -1;
    MPI_Recv_init(&w, 1, MPI_INT, left, 901, MPI_COMM_WORLD, &q[0]);
    MPI_Ssend_init(&v, 1, MPI_INT, right, 901, MPI_COMM_WORLD, &q[1]);
    for (int it = 0; it < 10; it++) {
        v = rank * 10 + it;
        MPI_Startall(2, q);
        MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        CHECK(w == left * 10 + it, "persistent Ssend iteration %d got %d", it, w);
    }
    MPI_Request_free(&q[0]);
    MPI_Request_free(&q[1]);
    free(s);
    free(r);
}

/* Mprobe takes the message: a Recv of the same source and tag between the
 * probe and the Mrecv gets the next one. Works for n == 1 (self). */
static void test_matched_probe(void)
{
    enum { BIG = 1 << 20 };
    int a[4] = {rank * 10 + 1, rank * 10 + 2, rank * 10 + 3, rank * 10 + 4};
    int b[2] = {rank * 10 + 5, rank * 10 + 6};
    unsigned char *big = malloc(BIG), *bigr = malloc(BIG);
    fill_pattern(big, BIG, rank + 77);
    MPI_Request sr[4];
    MPI_Isend(a, 4, MPI_INT, right, 700, MPI_COMM_WORLD, &sr[0]);
    MPI_Isend(b, 2, MPI_INT, right, 700, MPI_COMM_WORLD, &sr[1]);
    MPI_Isend(big, BIG, MPI_BYTE, right, 701, MPI_COMM_WORLD, &sr[2]);
    MPI_Isend(a, 4, MPI_INT, right, 702, MPI_COMM_WORLD, &sr[3]);

    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    int count = -1;
    MPI_Mprobe(left, 700, MPI_COMM_WORLD, &msg, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(msg != MPI_MESSAGE_NULL && count == 4, "Mprobe: message %d, count %d", msg != MPI_MESSAGE_NULL, count);
    int rb[4] = {0, 0, 0, 0};
    MPI_Recv(rb, 2, MPI_INT, left, 700, MPI_COMM_WORLD, &st);
    CHECK(rb[0] == left * 10 + 5 && rb[1] == left * 10 + 6,
          "Recv after Mprobe took the probed message (%d %d), not the next", rb[0], rb[1]);
    int ra[4] = {0, 0, 0, 0};
    MPI_Mrecv(ra, 4, MPI_INT, &msg, &st);
    CHECK(msg == MPI_MESSAGE_NULL, "Mrecv did not null the message");
    CHECK_STATUS(st, left, 700, 4 * (int)sizeof(int));
    CHECK(ra[0] == left * 10 + 1 && ra[3] == left * 10 + 4, "Mrecv data %d %d", ra[0], ra[3]);

    int flag = 0;
    while (!flag)
        MPI_Improbe(left, 701, MPI_COMM_WORLD, &flag, &msg, &st);
    MPI_Request rr;
    MPI_Imrecv(bigr, BIG, MPI_BYTE, &msg, &rr);
    MPI_Wait(&rr, &st);
    CHECK_STATUS(st, left, 701, BIG);
    CHECK(check_pattern(bigr, BIG, left + 77) < 0, "Imrecv of 1 MiB: data");

    /* Too small a receive for the probed message: truncated, reported. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Mprobe(left, 702, MPI_COMM_WORLD, &msg, &st);
    int small[2] = {0, 0};
    int rc = MPI_Mrecv(small, 2, MPI_INT, &msg, &st);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TRUNCATE, "Mrecv into 2 of 4 ints: class %d, not MPI_ERR_TRUNCATE", cls);
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 702, "truncated Mrecv status %d %d", st.MPI_SOURCE, st.MPI_TAG);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    MPI_Waitall(4, sr, MPI_STATUSES_IGNORE);
    free(big);
    free(bigr);
}

/* MPI_Type_free does not end the operations using the type: a pending
 * receive and a persistent receive still unpack through it. */
static void test_type_freed_in_use(void)
{
    MPI_Datatype t;
    MPI_Type_vector(4, 1, 2, MPI_INT, &t);
    MPI_Type_commit(&t);
    int r1[8], r2[8];
    for (int i = 0; i < 8; i++)
        r1[i] = r2[i] = -1;
    MPI_Request rq, pq;
    MPI_Irecv(r1, 1, t, left, 710, MPI_COMM_WORLD, &rq);
    MPI_Recv_init(r2, 1, t, left, 711, MPI_COMM_WORLD, &pq);
    MPI_Type_free(&t);
    CHECK(t == MPI_DATATYPE_NULL, "Type_free did not null the handle");
    int s[4] = {rank + 1, rank + 2, rank + 3, rank + 4};
    for (int round = 0; round < 2; round++) {
        MPI_Request sr[2];
        MPI_Isend(s, 4, MPI_INT, right, 710, MPI_COMM_WORLD, &sr[0]);
        MPI_Isend(s, 4, MPI_INT, right, 711, MPI_COMM_WORLD, &sr[1]);
        if (round == 0) {
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            CHECK(r1[0] == left + 1 && r1[1] == -1 && r1[6] == left + 4 && r1[7] == -1,
                  "receive through a freed type: %d %d %d %d", r1[0], r1[1], r1[6], r1[7]);
        } else
            MPI_Recv(r1, 4, MPI_INT, left, 710, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Start(&pq);
        MPI_Wait(&pq, MPI_STATUS_IGNORE);
        MPI_Waitall(2, sr, MPI_STATUSES_IGNORE);
        CHECK(r2[0] == left + 1 && r2[1] == -1 && r2[6] == left + 4 && r2[7] == -1,
              "persistent receive through a freed type, round %d: %d %d %d %d", round, r2[0], r2[1], r2[6], r2[7]);
    }
    MPI_Request_free(&pq);
}

/* MPI 4.0's MPI_Isendrecv and MPI_Isendrecv_replace in a ring: small and
 * rendezvous-sized messages, completed by Wait, by a Test loop and by
 * Waitall beside each other; the status is the receive's; a freed one
 * still delivers; MPI_PROC_NULL partners. */
static void test_isendrecv(void)
{
    /* MPICH 4.0.2's MPI_Isendrecv reports a wrong status and then crashes
     * in MPI_Waitall: not run there. */
    if (g_lenient_ref)
        return;
    int n = 1 << 16;
    int *out = malloc(n * sizeof(int)), *in = malloc(n * sizeof(int));
    for (int len = 1; len <= n; len *= 256) {
        for (int i = 0; i < len; i++) {
            out[i] = rank * 1000003 + i;
            in[i] = -1;
        }
        MPI_Request r;
        MPI_Status st;
        CHECK_MPI(MPI_Isendrecv(out, len, MPI_INT, right, 31, in, len, MPI_INT, left, 31,
                                MPI_COMM_WORLD, &r));
        int flag = 0;
        if (len == 1) {
            while (!flag)
                CHECK_MPI(MPI_Test(&r, &flag, &st));
        } else {
            CHECK_MPI(MPI_Wait(&r, &st));
        }
        int cnt = -1;
        MPI_Get_count(&st, MPI_INT, &cnt);
        CHECK(r == MPI_REQUEST_NULL && st.MPI_SOURCE == left && st.MPI_TAG == 31 && cnt == len,
              "Isendrecv %d: source %d tag %d count %d", len, st.MPI_SOURCE, st.MPI_TAG, cnt);
        for (int i = 0; i < len; i++)
            if (in[i] != left * 1000003 + i) {
                CHECK(0, "Isendrecv %d: element %d is %d", len, i, in[i]);
                break;
            }
        /* In place: the buffer goes right and comes back from the left. */
        for (int i = 0; i < len; i++)
            in[i] = rank * 7 + i;
        CHECK_MPI(MPI_Isendrecv_replace(in, len, MPI_INT, right, 32, left, 32, MPI_COMM_WORLD,
                                        &r));
        CHECK_MPI(MPI_Wait(&r, &st));
        for (int i = 0; i < len; i++)
            if (in[i] != left * 7 + i) {
                CHECK(0, "Isendrecv_replace %d: element %d is %d", len, i, in[i]);
                break;
            }
    }
    /* Two at once, with MPI_Waitall; both directions of the ring. */
    {
        int a = rank, b = -1, c = rank + 100, d = -1;
        MPI_Request rs[2];
        MPI_Status sts[2];
        CHECK_MPI(MPI_Isendrecv(&a, 1, MPI_INT, right, 33, &b, 1, MPI_INT, left, 33,
                                MPI_COMM_WORLD, &rs[0]));
        CHECK_MPI(MPI_Isendrecv(&c, 1, MPI_INT, left, 34, &d, 1, MPI_INT, right, 34,
                                MPI_COMM_WORLD, &rs[1]));
        CHECK_MPI(MPI_Waitall(2, rs, sts));
        CHECK(b == left && d == right + 100 && sts[1].MPI_SOURCE == right,
              "Isendrecv pair: %d %d (source %d)", b, d, sts[1].MPI_SOURCE);
    }
    /* Freed at once: the exchange still happens (the marker sent after it
     * on the same path arrives after it, and it is eager: matched, and so
     * copied, first). */
    {
        int a = rank + 5, b = -1;
        MPI_Request r;
        CHECK_MPI(MPI_Isendrecv(&a, 1, MPI_INT, right, 35, &b, 1, MPI_INT, left, 35,
                                MPI_COMM_WORLD, &r));
        CHECK_MPI(MPI_Request_free(&r));
        CHECK(r == MPI_REQUEST_NULL, "Request_free of an Isendrecv");
        int probe = -1;
        /* Its send reaches the right neighbour: receive a marker after it. */
        CHECK_MPI(MPI_Sendrecv(&a, 1, MPI_INT, right, 36, &probe, 1, MPI_INT, left, 36,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(b == left + 5, "a freed Isendrecv delivered %d", b);
    }
    /* MPI_PROC_NULL on both sides: complete at once, the empty status of
     * MPI_PROC_NULL. */
    {
        int a = 1, b = -1;
        MPI_Request r;
        MPI_Status st;
        CHECK_MPI(MPI_Isendrecv(&a, 1, MPI_INT, MPI_PROC_NULL, 0, &b, 1, MPI_INT, MPI_PROC_NULL,
                                0, MPI_COMM_WORLD, &r));
        CHECK_MPI(MPI_Wait(&r, &st));
        CHECK(b == -1 && st.MPI_SOURCE == MPI_PROC_NULL, "Isendrecv with MPI_PROC_NULL: %d %d",
              b, st.MPI_SOURCE);
    }
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    rank = g_rank;
    size = g_size;
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    test_send_recv_sizes();
    MPI_Barrier(MPI_COMM_WORLD);
    test_sync_ready();
    MPI_Barrier(MPI_COMM_WORLD);
    test_nonblocking();
    MPI_Barrier(MPI_COMM_WORLD);
    test_multi_completion();
    MPI_Barrier(MPI_COMM_WORLD);
    test_any_source();
    MPI_Barrier(MPI_COMM_WORLD);
    test_get_count_elements();
    MPI_Barrier(MPI_COMM_WORLD);
    test_proc_null();
    MPI_Barrier(MPI_COMM_WORLD);
    test_sendrecv_ring();
    MPI_Barrier(MPI_COMM_WORLD);
    test_isendrecv();
    MPI_Barrier(MPI_COMM_WORLD);
    test_probe();
    test_ordering();
    MPI_Barrier(MPI_COMM_WORLD);
    test_request_free_and_status();
    MPI_Barrier(MPI_COMM_WORLD);
    test_cancel_and_null();
    test_persistent();
    MPI_Barrier(MPI_COMM_WORLD);
    test_matched_probe();
    MPI_Barrier(MPI_COMM_WORLD);
    test_type_freed_in_use();
    return finish("p2p");
}
