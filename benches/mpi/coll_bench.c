/*
 * coll_bench: latency and bandwidth of MPI collectives, reported the way
 * nccl-tests reports them, so the numbers can be put next to
 * `tandem-perf allreduce` (and friends).
 *
 *   coll_bench <allreduce|reduce|broadcast|allgather|reduce_scatter|alltoall>
 *              [--min-size S] [--max-size S] [--iters N] [--min-iters N]
 *              [--time SEC] [--type T] [--op sum|prod|max|min] [--root R]
 *              [--barrier] [--no-check] [--json]
 *
 * Size is the per-rank buffer size in bytes as nccl-tests defines it:
 *   allreduce, reduce, broadcast: the buffer;
 *   allgather:                    the output (count * nranks * elsize);
 *   reduce_scatter:               the input  (count * nranks * elsize);
 *   alltoall:                     the whole send buffer.
 * Sizes that are not a multiple of the element size (times nranks for the
 * last three) are rounded down; the size printed is the one used.
 *
 * Per size: a few warm-up calls, then every call of the timed batch is
 * timed on its own, back to back, after one barrier. After the batch the
 * per-call times are reduced with MPI_MAX over the ranks (the slowest rank
 * defines call i's time) and the median over the calls is reported.
 *   algbw = size / time, busbw = algbw * factor, GB/s = 10^9 bytes/s,
 *   factor: allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall
 *   (n-1)/n; broadcast, reduce 1.
 *
 * Correctness: rank r's send element i holds (r+1) + (i % 7) (small
 * integers, so float sums are exact); after the timed batch the output is
 * filled with a sentinel, the collective runs once more and every output
 * element is compared with its expected value. #wrong counts the elements
 * that differ, summed over the ranks.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ */
/* data types                                                          */

typedef enum { K_I8, K_U8, K_I32, K_U32, K_I64, K_U64, K_F32, K_F64 } kind_t;

struct dtype {
    kind_t kind;
    const char *name;    /* as nccl-tests prints it */
    const char *alias1;  /* short spelling accepted on the command line */
    const char *alias2;
    size_t size;
    int is_float;
};

static const struct dtype DTYPES[] = {
    {K_I8, "int8", "i8", "char", 1, 0},
    {K_U8, "uint8", "u8", "byte", 1, 0},
    {K_I32, "int32", "i32", "int", 4, 0},
    {K_U32, "uint32", "u32", "uint", 4, 0},
    {K_I64, "int64", "i64", "long", 8, 0},
    {K_U64, "uint64", "u64", "ulong", 8, 0},
    {K_F32, "float", "f32", "float32", 4, 1},
    {K_F64, "double", "f64", "float64", 8, 1},
};
#define N_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

static MPI_Datatype mpi_type(kind_t k) {
    switch (k) {
    case K_I8: return MPI_INT8_T;
    case K_U8: return MPI_UINT8_T;
    case K_I32: return MPI_INT32_T;
    case K_U32: return MPI_UINT32_T;
    case K_I64: return MPI_INT64_T;
    case K_U64: return MPI_UINT64_T;
    case K_F32: return MPI_FLOAT;
    case K_F64: return MPI_DOUBLE;
    }
    return MPI_DATATYPE_NULL;
}

/* X-macro over (kind, C type) for the typed loops. */
#define FOR_KINDS(X)                                                         \
    X(K_I8, int8_t)                                                          \
    X(K_U8, uint8_t)                                                         \
    X(K_I32, int32_t)                                                        \
    X(K_U32, uint32_t)                                                       \
    X(K_I64, int64_t)                                                        \
    X(K_U64, uint64_t)                                                       \
    X(K_F32, float)                                                          \
    X(K_F64, double)

/* ------------------------------------------------------------------ */
/* collectives                                                         */

typedef enum { C_ALLREDUCE, C_REDUCE, C_BCAST, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL } coll_t;

static const struct {
    coll_t coll;
    const char *name;
    const char *alias;
    int reduces; /* takes a reduction operator */
    int rooted;
} COLLS[] = {
    {C_ALLREDUCE, "allreduce", "all_reduce", 1, 0},
    {C_REDUCE, "reduce", "reduce", 1, 1},
    {C_BCAST, "broadcast", "bcast", 0, 1},
    {C_ALLGATHER, "allgather", "all_gather", 0, 0},
    {C_REDUCE_SCATTER, "reduce_scatter", "reducescatter", 1, 0},
    {C_ALLTOALL, "alltoall", "all_to_all", 0, 0},
};
#define N_COLLS (sizeof COLLS / sizeof COLLS[0])

typedef enum { R_SUM, R_PROD, R_MAX, R_MIN } redop_t;
static const char *REDOP_NAMES[] = {"sum", "prod", "max", "min"};

static MPI_Op mpi_op(redop_t r) {
    switch (r) {
    case R_SUM: return MPI_SUM;
    case R_PROD: return MPI_PROD;
    case R_MAX: return MPI_MAX;
    case R_MIN: return MPI_MIN;
    }
    return MPI_OP_NULL;
}

/* ------------------------------------------------------------------ */
/* options                                                             */

struct opts {
    int ci; /* index into COLLS */
    size_t min_size, max_size;
    long iters, min_iters;
    double target_s;
    const struct dtype *dt;
    redop_t redop;
    int root;
    int barrier_each;
    int check;
    int json;
};

static const char USAGE[] =
    "usage: coll_bench <allreduce|reduce|broadcast|allgather|reduce_scatter|alltoall> [options]\n"
    "\n"
    "  --min-size S    smallest size in bytes (default 8; accepts K, M, G)\n"
    "  --max-size S    largest size (default 64M, at most 1G); sizes double from\n"
    "                  min to max, max included\n"
    "  --iters N       timed calls per size (default 10000); sizes where N calls\n"
    "                  would take longer than --time get fewer\n"
    "  --min-iters N   never fewer timed calls than this (default 20)\n"
    "  --time SEC      time budget of one size's timed batch (default 0.3);\n"
    "                  0: always exactly --iters calls\n"
    "  --type T        int8 uint8 int32 uint32 int64 uint64 float double\n"
    "                  (also i8 u8 i32 u32 i64 u64 f32 f64; default float)\n"
    "  --op OP         sum prod max min (default sum; reductions only)\n"
    "  --root R        root of reduce and broadcast (default 0)\n"
    "  --barrier       barrier (untimed) before every timed call\n"
    "  --no-check      do not verify the results (#wrong prints N/A)\n"
    "  --json          rank 0 prints one JSON array of\n"
    "                  {\"size\",\"p50_us\",\"algbw\",\"busbw\",\"wrong\"} on stdout;\n"
    "                  headers and the table go to stderr\n"
    "\n"
    "size is per rank, as in nccl-tests: the buffer (allreduce, reduce,\n"
    "broadcast), the output (allgather), the input (reduce_scatter), the send\n"
    "buffer (alltoall). time = median over calls of the slowest rank's time.\n";

static int parse_size(const char *s, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 0: break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: return -1;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        return -1;
    if (v > (ULLONG_MAX >> shift))
        return -1;
    *out = (size_t)(v << shift);
    return 0;
}

static int parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

/* Returns 0 to run, 1 for --help, -1 on error (message in err). */
static int parse_args(int argc, char **argv, struct opts *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->ci = -1;
    o->min_size = 8;
    o->max_size = (size_t)64 << 20;
    o->iters = 10000;
    o->min_iters = 20;
    o->target_s = 0.3;
    o->dt = &DTYPES[6]; /* float */
    o->redop = R_SUM;
    o->root = 0;
    o->check = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
#define NEED()                                                               \
    do {                                                                     \
        if (!v) {                                                            \
            snprintf(err, errlen, "%s needs a value", a);                    \
            return -1;                                                       \
        }                                                                    \
        i++;                                                                 \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else if (!strcmp(a, "--min-size")) {
            NEED();
            if (parse_size(v, &o->min_size)) { snprintf(err, errlen, "bad --min-size %s", v); return -1; }
        } else if (!strcmp(a, "--max-size")) {
            NEED();
            if (parse_size(v, &o->max_size)) { snprintf(err, errlen, "bad --max-size %s", v); return -1; }
        } else if (!strcmp(a, "--iters") || !strcmp(a, "-n")) {
            NEED();
            if (parse_long(v, &o->iters) || o->iters < 1) { snprintf(err, errlen, "bad --iters %s", v); return -1; }
        } else if (!strcmp(a, "--min-iters")) {
            NEED();
            if (parse_long(v, &o->min_iters) || o->min_iters < 1) { snprintf(err, errlen, "bad --min-iters %s", v); return -1; }
        } else if (!strcmp(a, "--time")) {
            NEED();
            char *end;
            o->target_s = strtod(v, &end);
            if (end == v || *end || !(o->target_s >= 0)) { snprintf(err, errlen, "bad --time %s", v); return -1; }
        } else if (!strcmp(a, "--type") || !strcmp(a, "-d")) {
            NEED();
            o->dt = NULL;
            for (size_t t = 0; t < N_DTYPES; t++)
                if (!strcmp(v, DTYPES[t].name) || !strcmp(v, DTYPES[t].alias1) || !strcmp(v, DTYPES[t].alias2))
                    o->dt = &DTYPES[t];
            if (!o->dt) { snprintf(err, errlen, "unknown --type %s", v); return -1; }
        } else if (!strcmp(a, "--op") || !strcmp(a, "-o")) {
            NEED();
            int found = 0;
            for (int r = 0; r < 4; r++)
                if (!strcmp(v, REDOP_NAMES[r])) { o->redop = (redop_t)r; found = 1; }
            if (!found) { snprintf(err, errlen, "unknown --op %s", v); return -1; }
        } else if (!strcmp(a, "--root")) {
            NEED();
            long r;
            if (parse_long(v, &r) || r < 0 || r > INT_MAX) { snprintf(err, errlen, "bad --root %s", v); return -1; }
            o->root = (int)r;
        } else if (!strcmp(a, "--barrier")) {
            o->barrier_each = 1;
        } else if (!strcmp(a, "--no-check")) {
            o->check = 0;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (a[0] == '-') {
            snprintf(err, errlen, "unknown option %s", a);
            return -1;
        } else if (o->ci < 0) {
            for (size_t c = 0; c < N_COLLS; c++)
                if (!strcmp(a, COLLS[c].name) || !strcmp(a, COLLS[c].alias))
                    o->ci = (int)c;
            if (o->ci < 0) { snprintf(err, errlen, "unknown collective %s", a); return -1; }
        } else {
            snprintf(err, errlen, "unexpected argument %s", a);
            return -1;
        }
#undef NEED
    }
    if (o->ci < 0) { snprintf(err, errlen, "missing collective"); return -1; }
    if (o->max_size > ((size_t)1 << 30)) { snprintf(err, errlen, "--max-size is at most 1G"); return -1; }
    if (o->min_size < 1) o->min_size = 1;
    if (o->min_size > o->max_size) { snprintf(err, errlen, "--min-size is above --max-size"); return -1; }
    if (o->min_iters > o->iters) o->min_iters = o->iters;
    return 0;
}

/* ------------------------------------------------------------------ */
/* benchmark state                                                     */

struct bench {
    const struct opts *o;
    coll_t coll;
    MPI_Comm comm;
    int rank, nranks;
    MPI_Datatype mdt;
    MPI_Op mop;
    void *sbuf, *rbuf;
    /* per size */
    size_t count;   /* elements printed in the count column (nccl-tests) */
    size_t chunk;   /* elements per rank for allgather/reduce_scatter/alltoall */
    size_t bytes;   /* the size actually used */
};

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Works out count/chunk/bytes for a requested size; 0 when too small. */
static int set_size(struct bench *b, size_t size) {
    size_t es = b->o->dt->size, n = (size_t)b->nranks;
    switch (b->coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
    case C_BCAST:
        b->count = size / es;
        b->chunk = b->count;
        break;
    case C_ALLGATHER:
    case C_REDUCE_SCATTER:
    case C_ALLTOALL:
        b->chunk = size / (es * n);
        b->count = b->chunk * n;
        break;
    }
    b->bytes = b->count * es;
    if (b->count == 0 || b->chunk > (size_t)INT_MAX)
        return 0;
    return 1;
}

static void run_once(const struct bench *b) {
    int c = (int)b->chunk;
    switch (b->coll) {
    case C_ALLREDUCE:
        MPI_Allreduce(b->sbuf, b->rbuf, c, b->mdt, b->mop, b->comm);
        break;
    case C_REDUCE:
        MPI_Reduce(b->sbuf, b->rbuf, c, b->mdt, b->mop, b->o->root, b->comm);
        break;
    case C_BCAST:
        MPI_Bcast(b->rbuf, c, b->mdt, b->o->root, b->comm);
        break;
    case C_ALLGATHER:
        MPI_Allgather(b->sbuf, c, b->mdt, b->rbuf, c, b->mdt, b->comm);
        break;
    case C_REDUCE_SCATTER:
        MPI_Reduce_scatter_block(b->sbuf, b->rbuf, c, b->mdt, b->mop, b->comm);
        break;
    case C_ALLTOALL:
        MPI_Alltoall(b->sbuf, c, b->mdt, b->rbuf, c, b->mdt, b->comm);
        break;
    }
}

/* Element i of rank r's data: (r+1) + (i % 7). */
static void fill_pattern(void *buf, kind_t k, size_t n, int r) {
    switch (k) {
#define F(K, T)                                                              \
    case K: {                                                                \
        T *p = (T *)buf;                                                     \
        for (size_t i = 0; i < n; i++)                                       \
            p[i] = (T)(r + 1 + (int)(i % 7));                                \
    } break;
        FOR_KINDS(F)
#undef F
    }
}

/* Reduction of (q+1) + m over q = 0..n-1, for m = 0..6, in integer
 * (wrapping, as the C types do) and floating arithmetic. */
static void reduce_table(redop_t op, int n, uint64_t tu[7], double td[7]) {
    for (int m = 0; m < 7; m++) {
        uint64_t u = (op == R_SUM) ? 0 : (op == R_PROD) ? 1 : (uint64_t)(1 + m);
        double d = (double)u;
        for (int q = 0; q < n; q++) {
            uint64_t v = (uint64_t)(q + 1 + m);
            switch (op) {
            case R_SUM: u += v; d += (double)v; break;
            case R_PROD: u *= v; d *= (double)v; break;
            case R_MAX: if (v > u) u = v; d = (double)u; break;
            case R_MIN: if (v < u) u = v; d = (double)u; break;
            }
        }
        tu[m] = u;
        td[m] = d;
    }
}

/* Expected value of output element k on this rank (as integer and float). */
struct expect {
    coll_t coll;
    int rank, root;
    size_t chunk;
    uint64_t tu[7];
    double td[7];
};

static inline uint64_t expect_small(const struct expect *e, size_t k) {
    switch (e->coll) {
    case C_BCAST:
        return (uint64_t)(e->root + 1) + k % 7;
    case C_ALLGATHER:
        return (uint64_t)(k / e->chunk + 1) + (k % e->chunk) % 7;
    case C_ALLTOALL:
        return (uint64_t)(k / e->chunk + 1) + ((size_t)e->rank * e->chunk + k % e->chunk) % 7;
    default:
        return 0;
    }
}

/* Number of output elements on this rank that differ from the expected. */
static long long count_wrong(const struct bench *b, const void *buf, size_t n) {
    struct expect e;
    e.coll = b->coll;
    e.rank = b->rank;
    e.root = b->o->root;
    e.chunk = b->chunk;
    reduce_table(b->o->redop, b->nranks, e.tu, e.td);
    size_t base = (b->coll == C_REDUCE_SCATTER) ? (size_t)b->rank * b->chunk : 0;
    int reduced = COLLS[b->o->ci].reduces;
    long long wrong = 0;
    switch (b->o->dt->kind) {
#define F(K, T)                                                              \
    case K: {                                                                \
        const T *p = (const T *)buf;                                         \
        int fl = b->o->dt->is_float;                                         \
        for (size_t k = 0; k < n; k++) {                                     \
            T want;                                                          \
            if (reduced) {                                                   \
                size_t m = (base + k) % 7;                                   \
                want = fl ? (T)e.td[m] : (T)e.tu[m];                         \
            } else {                                                         \
                want = (T)expect_small(&e, k);                               \
            }                                                                \
            if (!(p[k] == want))                                             \
                wrong++;                                                     \
        }                                                                    \
    } break;
        FOR_KINDS(F)
#undef F
    }
    return wrong;
}

/* Runs the collective once on fresh data and counts wrong elements over
 * all ranks (the total, on every rank). */
static long long verify(struct bench *b) {
    size_t es = b->o->dt->size;
    size_t out_elems = 0;
    int checks = 1;
    switch (b->coll) {
    case C_ALLREDUCE: out_elems = b->count; break;
    case C_REDUCE: out_elems = b->count; checks = (b->rank == b->o->root); break;
    case C_BCAST: out_elems = b->count; break;
    case C_ALLGATHER: out_elems = b->count; break;
    case C_REDUCE_SCATTER: out_elems = b->chunk; break;
    case C_ALLTOALL: out_elems = b->count; break;
    }
    memset(b->rbuf, 0xff, out_elems * es); /* NaN for floats, -1/max for ints */
    if (b->coll == C_BCAST && b->rank == b->o->root)
        fill_pattern(b->rbuf, b->o->dt->kind, b->count, b->rank);
    MPI_Barrier(b->comm);
    run_once(b);
    long long wrong = checks ? count_wrong(b, b->rbuf, out_elems) : 0;
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, b->comm);
    return wrong;
}

/* Nearest-rank percentile, the same definition as tandem-perf's. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double percentile(double *v, long n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    long i = (long)(p / 100.0 * (double)(n - 1) + 0.5);
    if (i > n - 1) i = n - 1;
    return v[i];
}

static double bus_factor(coll_t c, int n) {
    switch (c) {
    case C_ALLREDUCE: return 2.0 * (n - 1) / n;
    case C_REDUCE_SCATTER:
    case C_ALLGATHER:
    case C_ALLTOALL: return (double)(n - 1) / n;
    case C_REDUCE:
    case C_BCAST: return 1.0;
    }
    return 1.0;
}

/* Warm-up, then the timed batch; returns the median (seconds) over calls
 * of the slowest rank's time, on rank 0 (others return 0). */
static double time_size(struct bench *b, long *iters_out) {
    const struct opts *o = b->o;
    /* First calls: page faults, connection set-up, algorithm selection. */
    run_once(b);
    run_once(b);
    /* Warm-up in batches of doubling length, until about a tenth of
     * --iters calls or a twentieth of --time has gone by; then two more
     * batches of the last length. The batch times (slowest rank, so that
     * every rank takes the same decisions) estimate the time per call; the
     * best batch counts, so one preempted batch does not cut the timed
     * batch short. */
    long warm = 2, k = 1, extra = 0;
    double per_call = -1;
    long warm_target = o->iters / 10 > 2 ? o->iters / 10 : 2;
    double warm_budget = o->target_s / 20;
    for (;;) {
        MPI_Barrier(b->comm);
        double t0 = now_s();
        for (long i = 0; i < k; i++)
            run_once(b);
        double t = now_s() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, b->comm);
        warm += k;
        if (per_call < 0 || t / (double)k < per_call)
            per_call = t / (double)k;
        if (extra > 0) {
            if (--extra == 0)
                break;
        } else if (warm >= warm_target || t >= warm_budget) {
            extra = 2;
        } else {
            k *= 2;
        }
    }
    /* The timed batch: --iters calls, or fewer when they would take more
     * than --time (but at least --min-iters). The calls are timed one by
     * one, back to back, after one barrier. With a time budget the batch
     * runs in rounds: after each, the ranks agree (an untimed allreduce of
     * the slowest rank's elapsed time) whether to go on, and size the next
     * round from the time per call measured so far, so a poor warm-up
     * estimate costs a few extra rounds rather than a short batch. */
    double *times = malloc((size_t)o->iters * sizeof *times);
    if (!times) {
        fprintf(stderr, "coll_bench: out of memory for %ld samples\n", o->iters);
        MPI_Abort(b->comm, 1);
    }
    long round = o->iters;
    if (o->target_s > 0 && per_call > 0) {
        double fit = o->target_s / per_call / 2;
        if (fit < (double)round)
            round = fit < (double)o->min_iters ? o->min_iters : (long)fit;
    }
    long iters = 0;
    double elapsed = 0;
    MPI_Barrier(b->comm);
    while (iters < o->iters) {
        if (round > o->iters - iters)
            round = o->iters - iters;
        if (round < 1)
            round = 1;
        double r0 = now_s();
        for (long i = iters; i < iters + round; i++) {
            if (o->barrier_each)
                MPI_Barrier(b->comm);
            double t0 = now_s();
            run_once(b);
            times[i] = now_s() - t0;
        }
        iters += round;
        if (o->target_s <= 0 || iters >= o->iters)
            break;
        double t = now_s() - r0;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, b->comm);
        elapsed += t;
        if (elapsed >= o->target_s && iters >= o->min_iters)
            break;
        double per = elapsed / (double)iters;
        double left = (o->target_s - elapsed) / per;
        round = left < 1 ? 1 : left > (double)o->iters ? o->iters : (long)left;
        if (iters + round < o->min_iters)
            round = o->min_iters - iters;
    }
    if (b->rank == 0)
        MPI_Reduce(MPI_IN_PLACE, times, (int)iters, MPI_DOUBLE, MPI_MAX, 0, b->comm);
    else
        MPI_Reduce(times, NULL, (int)iters, MPI_DOUBLE, MPI_MAX, 0, b->comm);
    double p50 = 0;
    if (b->rank == 0)
        p50 = percentile(times, iters, 50.0);
    free(times);
    *iters_out = iters;
    return p50;
}

struct row {
    size_t size;
    double p50_us, algbw, busbw;
    long long wrong; /* -1: not checked */
};

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    struct opts o;
    char err[256] = "";
    int pr = parse_args(argc, argv, &o, err, sizeof err);
    if (pr != 0) {
        if (rank == 0) {
            if (pr < 0)
                fprintf(stderr, "coll_bench: %s\n\n", err);
            fputs(USAGE, pr < 0 ? stderr : stdout);
        }
        MPI_Finalize();
        return pr < 0 ? 2 : 0;
    }
    if (COLLS[o.ci].rooted && o.root >= nranks) {
        if (rank == 0)
            fprintf(stderr, "coll_bench: --root %d but only %d ranks\n", o.root, nranks);
        MPI_Finalize();
        return 2;
    }

    FILE *hdr = o.json ? stderr : stdout;
    struct bench b;
    memset(&b, 0, sizeof b);
    b.o = &o;
    b.coll = COLLS[o.ci].coll;
    b.comm = MPI_COMM_WORLD;
    b.rank = rank;
    b.nranks = nranks;
    b.mdt = mpi_type(o.dt->kind);
    b.mop = mpi_op(o.redop);

    /* One send and one receive buffer of the largest size, touched before
     * any timing so page faults stay out of the numbers. */
    size_t cap = o.max_size;
    if (posix_memalign(&b.sbuf, 4096, cap ? cap : 1) || posix_memalign(&b.rbuf, 4096, cap ? cap : 1)) {
        fprintf(stderr, "coll_bench: rank %d cannot allocate 2 x %zu bytes\n", rank, cap);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(b.rbuf, 0, cap);
    fill_pattern(b.sbuf, o.dt->kind, cap / o.dt->size, rank);

    if (rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(lib, &len);
        for (int i = 0; i < len; i++) /* first line only */
            if (lib[i] == '\n' || lib[i] == '\r') { lib[i] = 0; break; }
        fprintf(hdr, "# coll_bench %s: %d ranks, type %s, op %s, root %d\n", COLLS[o.ci].name, nranks,
                o.dt->name, COLLS[o.ci].reduces ? REDOP_NAMES[o.redop] : "none",
                COLLS[o.ci].rooted ? o.root : -1);
        fprintf(hdr, "# MPI: %s\n", lib);
        fprintf(hdr, "# up to %ld timed calls per size (at least %ld, about %.2g s each)%s;"
                     " time = p50 over calls of the slowest rank\n",
                o.iters, o.min_iters, o.target_s, o.barrier_each ? ", barrier before each" : "");
        fprintf(hdr, "#\n");
        fprintf(hdr, "# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %6s\n", "size", "count", "type", "redop",
                "root", "time", "algbw", "busbw", "#wrong", "iters");
        fprintf(hdr, "# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %6s\n", "(B)", "(elements)", "", "", "",
                "(us)", "(GB/s)", "(GB/s)", "", "");
        fflush(hdr);
    }

    size_t nrows_cap = 64, nrows = 0;
    struct row *rows = calloc(nrows_cap, sizeof *rows);
    long long total_wrong = 0;
    double busbw_sum = 0;
    size_t prev_bytes = (size_t)-1;
    double factor = bus_factor(b.coll, nranks);

    for (size_t size = o.min_size;; ) {
        if (set_size(&b, size) && b.bytes != prev_bytes) {
            prev_bytes = b.bytes;
            long iters = 0;
            double p50 = time_size(&b, &iters);
            long long wrong = o.check ? verify(&b) : -1;
            if (rank == 0) {
                double us = p50 * 1e6;
                double algbw = p50 > 0 ? (double)b.bytes / p50 / 1e9 : 0;
                double busbw = algbw * factor;
                char wbuf[32];
                if (wrong < 0)
                    snprintf(wbuf, sizeof wbuf, "N/A");
                else
                    snprintf(wbuf, sizeof wbuf, "%lld", wrong);
                fprintf(hdr, "  %10zu  %12zu  %8s  %6s  %6d  %9.2f  %7.2f  %7.2f  %6s  %6ld\n", b.bytes, b.count,
                        o.dt->name, COLLS[o.ci].reduces ? REDOP_NAMES[o.redop] : "none",
                        COLLS[o.ci].rooted ? o.root : -1, us, algbw, busbw, wbuf, iters);
                fflush(hdr);
                if (nrows == nrows_cap) {
                    nrows_cap *= 2;
                    rows = realloc(rows, nrows_cap * sizeof *rows);
                }
                rows[nrows++] = (struct row){b.bytes, us, algbw, busbw, wrong};
                busbw_sum += busbw;
                if (wrong > 0)
                    total_wrong += wrong;
            }
        } else if (rank == 0 && b.count == 0) {
            if (b.coll == C_ALLREDUCE || b.coll == C_REDUCE || b.coll == C_BCAST)
                fprintf(hdr, "# size %zu: less than one %s, skipped\n", size, o.dt->name);
            else
                fprintf(hdr, "# size %zu: less than one %s per rank (%d ranks), skipped\n", size, o.dt->name,
                        nranks);
        }
        if (size >= o.max_size)
            break;
        size = (size > o.max_size / 2) ? o.max_size : size * 2;
    }

    int status = 0;
    if (rank == 0) {
        fprintf(hdr, "# #wrong total: %lld %s\n", total_wrong,
                o.check ? (total_wrong ? "FAILED" : "OK") : "(not checked)");
        fprintf(hdr, "# Avg bus bandwidth    : %g\n", nrows ? busbw_sum / (double)nrows : 0.0);
        fflush(hdr);
        if (o.json) {
            printf("[");
            for (size_t i = 0; i < nrows; i++)
                printf("%s\n  {\"size\": %zu, \"p50_us\": %.4f, \"algbw\": %.6f, \"busbw\": %.6f, \"wrong\": %lld}",
                       i ? "," : "", rows[i].size, rows[i].p50_us, rows[i].algbw, rows[i].busbw, rows[i].wrong);
            printf("\n]\n");
            fflush(stdout);
        }
        status = total_wrong ? 1 : 0;
    }
    MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(rows);
    free(b.sbuf);
    free(b.rbuf);
    MPI_Finalize();
    return status;
}
