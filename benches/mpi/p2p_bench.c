/*
 * p2p_bench: MPI point-to-point latency and bandwidth between two ranks,
 * measured the way `tandem-perf pingpong` and `tandem-perf bw` measure
 * tandem, so the numbers can be put side by side.
 *
 *   p2p_bench <pingpong|bw> [--min-size S] [--max-size S] [--iters N] [--json]
 *
 * Exactly 2 ranks. Sizes double from --min-size to --max-size, the maximum
 * always included, and 0 first when --min-size is 0 (tandem-perf's sweep).
 * Per size, N = iters_for(size): --iters (default 20000) up to 64 KiB,
 * then about 2 GiB of traffic (2G / size, at least 10, at most --iters).
 *
 * pingpong: rank 0 MPI_Send then MPI_Recv, rank 1 the reverse, on one
 *   buffer (with --separate, osu_latency's pattern: send from one buffer,
 *   receive into another, so the sent data stays clean in the sender's
 *   cache instead of bouncing between the cores). max(N/10, 2) round trips of warm-up, then ceil(N/b) samples,
 *   each the time of b round trips / b / 2 (a half round trip); b = 16 up
 *   to 4096 B, else 1.
 * bw: per window, rank 0 posts w MPI_Isend of the same buffer, rank 1 w
 *   MPI_Irecv into distinct buffers, both MPI_Waitall, then rank 1 sends a
 *   1-byte acknowledgement (tag 1). w = clamp(256 MiB / size, 1, 64).
 *   max(L/10, 1) windows of warm-up, then L = max(N/w, 4) samples, each
 *   the window's time / w.
 *
 * Rank 0's samples are reported: p50 and p99 (nearest rank, as tandem-perf
 * computes them), gbps = size / p50 (bytes per ns = 10^9 B/s).
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

enum mode { M_PINGPONG, M_BW };
static const char *MODE_NAMES[] = {"pingpong", "bw"};

struct opts {
    int mode; /* -1 until given */
    size_t min_size, max_size;
    long iters;
    int json;
    int separate;
};

static const char USAGE[] =
    "usage: p2p_bench <pingpong|bw> [options]   (exactly 2 ranks)\n"
    "\n"
    "  pingpong        MPI_Send/MPI_Recv bounce: half round trip per size\n"
    "  bw              windows of up to 64 MPI_Isend (distinct MPI_Irecv buffers),\n"
    "                  then a 1-byte acknowledgement: time per message\n"
    "\n"
    "  --min-size S    smallest message in bytes (default 1; accepts K, M, G;\n"
    "                  0 adds an empty message first)\n"
    "  --max-size S    largest message (default 64M, at most 1G); sizes double\n"
    "                  from min to max, max included\n"
    "  --iters N       round trips per size up to 64K (default 20000); larger\n"
    "                  sizes run about 2 GiB of traffic, at least 10 and at\n"
    "                  most N round trips (bw: messages)\n"
    "  --separate      pingpong: send from one buffer, receive into another\n"
    "                  (osu_latency's pattern) instead of one buffer both ways\n"
    "  --json          print only a JSON array of\n"
    "                  {\"size\",\"p50_us\",\"p99_us\",\"gbps\"} on stdout (as\n"
    "                  tandem-perf --json); the header and table go to stderr\n";

static int parse_size(const char *s, size_t *out) {
    char *end;
    if (!(s[0] >= '0' && s[0] <= '9'))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
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
    if (*end || v > (ULLONG_MAX >> shift))
        return -1;
    *out = (size_t)(v << shift);
    return 0;
}

/* Returns 0 to run, 1 for --help, -1 on error (message in err). */
static int parse_args(int argc, char **argv, struct opts *o, char *err, size_t errlen) {
    o->mode = -1;
    o->min_size = 1;
    o->max_size = (size_t)64 << 20;
    o->iters = 20000;
    o->json = 0;
    o->separate = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (!strcmp(a, "--min-size") || !strcmp(a, "--max-size") || !strcmp(a, "--iters")) {
            if (!v) {
                snprintf(err, errlen, "%s needs a value", a);
                return -1;
            }
            i++;
            if (!strcmp(a, "--iters")) {
                char *end;
                errno = 0;
                long n = strtol(v, &end, 10);
                if (errno || end == v || *end || n < 1) {
                    snprintf(err, errlen, "bad --iters %s (a positive number)", v);
                    return -1;
                }
                o->iters = n;
            } else if (parse_size(v, !strcmp(a, "--min-size") ? &o->min_size : &o->max_size)) {
                snprintf(err, errlen, "bad %s %s (bytes, K/M/G suffixes allowed)", a, v);
                return -1;
            }
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--separate")) {
            o->separate = 1;
        } else if (a[0] == '-') {
            snprintf(err, errlen, "unknown option %s", a);
            return -1;
        } else if (o->mode < 0) {
            for (int m = 0; m < 2; m++)
                if (!strcmp(a, MODE_NAMES[m]))
                    o->mode = m;
            if (o->mode < 0) {
                snprintf(err, errlen, "unknown mode %s (pingpong or bw)", a);
                return -1;
            }
        } else {
            snprintf(err, errlen, "unexpected argument %s", a);
            return -1;
        }
    }
    if (o->mode < 0) {
        snprintf(err, errlen, "missing mode (pingpong or bw)");
        return -1;
    }
    if (o->max_size > ((size_t)1 << 30)) {
        snprintf(err, errlen, "--max-size is at most 1G");
        return -1;
    }
    if (o->min_size > o->max_size) {
        snprintf(err, errlen, "--min-size is larger than --max-size");
        return -1;
    }
    return 0;
}

/* tandem-perf's sweep: 0 first when min is 0, then doubling from
 * max(min, 1) while <= max, then max itself if it was not reached. */
#define MAX_SIZES 40
static int sweep(size_t min, size_t max, size_t *v) {
    int n = 0;
    if (min == 0)
        v[n++] = 0;
    for (size_t s = min ? min : 1; s <= max && n < MAX_SIZES - 1; s *= 2) {
        v[n++] = s;
        if (s > SIZE_MAX / 2)
            break;
    }
    if ((n == 0 || v[n - 1] != max) && max >= min)
        v[n++] = max;
    return n;
}

/* tandem-perf's iters_for: base up to 64 KiB, then 2 GiB / size clamped
 * to [10, base] (base itself when base is below 10). */
static long iters_for(size_t size, long base) {
    if (size <= ((size_t)64 << 10))
        return base;
    long v = (long)(((size_t)2 << 30) / size);
    if (v < 10)
        v = 10;
    if (v > base)
        v = base;
    return v;
}

/* tandem-perf's window: messages in flight per bw window. */
static int window(size_t size) {
    size_t w = ((size_t)256 << 20) / (size ? size : 1);
    return w < 1 ? 1 : w > 64 ? 64 : (int)w;
}

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest rank on the sorted samples: index round(p/100 * (n-1)), with
 * halves rounded up, as Rust's f64::round does for positive values. */
static double percentile_sorted(const double *v, long n, double p) {
    if (n <= 0)
        return 0;
    double x = p / 100.0 * (double)(n - 1);
    long i = (long)x;
    if (x - (double)i >= 0.5)
        i++;
    if (i > n - 1)
        i = n - 1;
    return v[i];
}

static void *xalloc(size_t n, int rank) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1)) {
        fprintf(stderr, "p2p_bench: rank %d cannot allocate %zu bytes\n", rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* Half round trips (ns) into samples; returns their count. */
static long pingpong(int rank, char *buf, char *rbuf, size_t size, long iters, double *samples) {
    int peer = 1 - rank, count = (int)size;
    long warm = iters / 10 > 2 ? iters / 10 : 2;
    long batch = size <= 4096 ? 16 : 1;
    long n = (iters + batch - 1) / batch;
    for (long i = 0; i < warm; i++) {
        if (rank == 0) {
            MPI_Send(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(rbuf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
        }
    }
    for (long k = 0; k < n; k++) {
        int64_t t0 = now_ns();
        for (long j = 0; j < batch; j++) {
            if (rank == 0) {
                MPI_Send(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                MPI_Recv(rbuf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(rbuf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
            }
        }
        samples[k] = (double)(now_ns() - t0) / (double)batch / 2.0;
    }
    return n;
}

/* One bw window: w messages of size from buf (rank 0) into w distinct
 * slices of rbuf (rank 1), then the acknowledgement. */
static void bw_window(int rank, const char *buf, char *rbuf, size_t size, int w) {
    /* Real statuses rather than MPI_STATUSES_IGNORE: GCC's
     * -Wstringop-overflow misreads MPICH's (MPI_Status *)1 constant. */
    static MPI_Status st[64];
    MPI_Request req[64];
    int peer = 1 - rank, count = (int)size;
    char ack = 1;
    if (rank == 0) {
        for (int i = 0; i < w; i++)
            MPI_Isend(buf, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &req[i]);
        MPI_Waitall(w, req, st);
        MPI_Recv(&ack, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        for (int i = 0; i < w; i++)
            MPI_Irecv(rbuf + (size_t)i * size, count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &req[i]);
        MPI_Waitall(w, req, st);
        MPI_Send(&ack, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    }
}

/* Per-message times (ns) into samples; returns their count. */
static long bandwidth(int rank, const char *buf, char *rbuf, size_t size, long iters, double *samples) {
    int w = window(size);
    long loops = iters / w > 4 ? iters / w : 4;
    long warm = loops / 10 > 1 ? loops / 10 : 1;
    for (long i = 0; i < warm; i++)
        bw_window(rank, buf, rbuf, size, w);
    for (long k = 0; k < loops; k++) {
        int64_t t0 = now_ns();
        bw_window(rank, buf, rbuf, size, w);
        samples[k] = (double)(now_ns() - t0) / (double)w;
    }
    return loops;
}

/* 1K, 64M, ... for exact binary units, else the number (tandem's fmt_size). */
static void fmt_size(size_t n, char *out, size_t len) {
    static const struct { const char *unit; unsigned shift; } U[] = {{"G", 30}, {"M", 20}, {"K", 10}};
    for (int i = 0; i < 3; i++) {
        size_t u = (size_t)1 << U[i].shift;
        if (n >= u && n % u == 0) {
            snprintf(out, len, "%zu%s", n / u, U[i].unit);
            return;
        }
    }
    snprintf(out, len, "%zu", n);
}

struct row {
    size_t size;
    double p50_us, p99_us, gbps;
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
                fprintf(stderr, "p2p_bench: %s\n\n", err);
            fputs(USAGE, pr < 0 ? stderr : stdout);
        }
        MPI_Finalize();
        return pr < 0 ? 2 : 0;
    }
    if (nranks != 2) {
        if (rank == 0)
            fprintf(stderr, "p2p_bench: needs exactly 2 ranks, got %d (mpirun -np 2 / mpiexec -n 2)\n", nranks);
        MPI_Finalize();
        return 2;
    }

    size_t sizes[MAX_SIZES];
    int nsizes = sweep(o.min_size, o.max_size, sizes);

    /* The message buffer (both ranks) and, for bw on rank 1, the window's
     * distinct receive buffers at the largest window * size; all touched
     * before any timing so page faults stay out of the numbers. */
    size_t rcap = 0;
    long scap = 1;
    for (int i = 0; i < nsizes; i++) {
        long it = iters_for(sizes[i], o.iters);
        if (o.mode == M_BW) {
            int w = window(sizes[i]);
            if ((size_t)w * sizes[i] > rcap)
                rcap = (size_t)w * sizes[i];
            long loops = it / w > 4 ? it / w : 4;
            if (loops > scap)
                scap = loops;
        } else {
            long batch = sizes[i] <= 4096 ? 16 : 1;
            long n = (it + batch - 1) / batch;
            if (n > scap)
                scap = n;
        }
    }
    char *buf = xalloc(o.max_size, rank);
    memset(buf, 0xa5, o.max_size);
    char *rbuf = NULL;
    if (o.mode == M_PINGPONG) {
        rbuf = o.separate ? xalloc(o.max_size, rank) : buf;
        if (o.separate)
            memset(rbuf, 0, o.max_size);
    } else if (rank == 1) {
        rbuf = xalloc(rcap, rank);
        memset(rbuf, 0, rcap);
    }
    double *samples = malloc((size_t)scap * sizeof *samples);
    struct row *rows = calloc((size_t)nsizes, sizeof *rows);
    if (!samples || !rows) {
        fprintf(stderr, "p2p_bench: rank %d: out of memory for %ld samples\n", rank, scap);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    FILE *hdr = o.json ? stderr : stdout;
    if (rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(lib, &len);
        /* First line only, tabs as spaces (MPICH: "MPICH Version:\t4.0"). */
        for (int i = 0; i < len && lib[i]; i++) {
            if (lib[i] == '\n' || lib[i] == '\r') {
                lib[i] = 0;
                break;
            }
            if (lib[i] == '\t')
                lib[i] = ' ';
        }
        fprintf(hdr, "# p2p_bench %s: %s\n", MODE_NAMES[o.mode], lib);
        if (o.mode == M_PINGPONG)
            fprintf(hdr, "# 2 ranks, MPI_Send/MPI_Recv, %s; us = half round trip (batches of 16 up to 4K);"
                         " GB/s = size / p50 us; --iters %ld\n",
                    o.separate ? "separate send and receive buffers" : "one buffer", o.iters);
        else
            fprintf(hdr, "# 2 ranks, windows of up to 64 MPI_Isend/MPI_Irecv + 1-byte ack;"
                         " us = time per message in a window; GB/s = size / p50 us; --iters %ld\n", o.iters);
        fprintf(hdr, "%10s %10s %10s %9s %8s\n", "size", "p50 us", "p99 us", "GB/s", "samples");
        fflush(hdr);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < nsizes; i++) {
        size_t size = sizes[i];
        long it = iters_for(size, o.iters);
        long n = o.mode == M_PINGPONG ? pingpong(rank, buf, rbuf, size, it, samples)
                                      : bandwidth(rank, buf, rbuf, size, it, samples);
        if (rank != 0)
            continue;
        qsort(samples, (size_t)n, sizeof *samples, cmp_double);
        double p50 = percentile_sorted(samples, n, 50.0);
        double p99 = percentile_sorted(samples, n, 99.0);
        rows[i] = (struct row){size, p50 / 1e3, p99 / 1e3, p50 > 0 ? (double)size / p50 : 0.0};
        char s[32];
        fmt_size(size, s, sizeof s);
        fprintf(hdr, "%10s %10.3f %10.3f %9.2f %8ld\n", s, rows[i].p50_us, rows[i].p99_us, rows[i].gbps, n);
        fflush(hdr);
    }

    if (rank == 0 && o.json) {
        /* The layout of tandem-perf's print_json. */
        printf("[\n  ");
        for (int i = 0; i < nsizes; i++)
            printf("%s{\"size\": %zu, \"p50_us\": %.4f, \"p99_us\": %.4f, \"gbps\": %.3f}", i ? ",\n  " : "",
                   rows[i].size, rows[i].p50_us, rows[i].p99_us, rows[i].gbps);
        printf("\n]\n");
        fflush(stdout);
    }
    free(rows);
    free(samples);
    if (rbuf != buf)
        free(rbuf);
    free(buf);
    MPI_Finalize();
    return 0;
}
