/*
 * topo.c - virtual topologies and neighbourhood collectives: Cartesian
 * grids (create, queries, shift, sub, map), graphs, distributed graphs
 * (adjacent and general), MPI_Topo_test, a duplicate keeping its
 * topology, and MPI_Neighbor_allgather(v)/alltoall(v/w) over each kind,
 * including periodic dimensions of one and two processes (both
 * neighbours one process) and the untouched blocks of MPI_PROC_NULL
 * neighbours.
 *
 * run-sizes: 1 2 3 4 6
 */
#include "common.h"

static int expect_fail(int rc, int cls_want, const char *what)
{
    int cls = -1;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS, "%s: accepted", what);
    CHECK_STD(rc == MPI_SUCCESS || cls == cls_want, "%s: class %d, expected %d", what, cls,
              cls_want);
    return rc != MPI_SUCCESS;
}

/* A 2-D grid, periodic in dimension 0 only. */
static void test_cart(void)
{
    int dims[2] = {0, 0}, periods[2] = {1, 0};
    MPI_Dims_create(g_size, 2, dims);
    MPI_Comm cart;
    CHECK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart) == MPI_SUCCESS,
          "Cart_create");
    int kind = -1, nd = -1, me;
    MPI_Topo_test(cart, &kind);
    CHECK(kind == MPI_CART, "Topo_test of a grid: %d", kind);
    MPI_Cartdim_get(cart, &nd);
    CHECK(nd == 2, "Cartdim_get %d", nd);
    MPI_Comm_rank(cart, &me);
    CHECK(me == g_rank, "a grid keeps the ranks (no reorder): %d", me);
    int gd[2], gp[2], gc[2], cc[2];
    MPI_Cart_get(cart, 2, gd, gp, gc);
    MPI_Cart_coords(cart, me, 2, cc);
    CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0, "Cart_get");
    CHECK(gc[0] == cc[0] && gc[1] == cc[1], "Cart_get's coordinates are Cart_coords'");
    CHECK(cc[0] == me / dims[1] && cc[1] == me % dims[1], "row-major coordinates (%d,%d)",
          cc[0], cc[1]);
    int r = -1;
    MPI_Cart_rank(cart, cc, &r);
    CHECK(r == me, "Cart_rank of my coordinates: %d", r);
    int wrapped[2] = {cc[0] + dims[0], cc[1]};
    MPI_Cart_rank(cart, wrapped, &r);
    CHECK(r == me, "Cart_rank wraps a periodic dimension: %d", r);

    /* Shifts. */
    int src, dst;
    MPI_Cart_shift(cart, 0, 1, &src, &dst);
    int up = ((cc[0] + 1) % dims[0]) * dims[1] + cc[1];
    int down = ((cc[0] - 1 + dims[0]) % dims[0]) * dims[1] + cc[1];
    CHECK(src == down && dst == up, "Cart_shift periodic: %d %d, expected %d %d", src, dst,
          down, up);
    MPI_Cart_shift(cart, 1, 1, &src, &dst);
    CHECK(src == (cc[1] > 0 ? me - 1 : MPI_PROC_NULL) &&
              dst == (cc[1] + 1 < dims[1] ? me + 1 : MPI_PROC_NULL),
          "Cart_shift at a non-periodic edge: %d %d", src, dst);

    /* Neighbor_alltoall: block j goes to neighbour j; what comes from
     * the negative neighbour is what it sent in the positive direction. */
    int sb[4], rb[4], nb[4];
    for (int j = 0; j < 4; j++) {
        sb[j] = me * 100 + j;
        rb[j] = -1;
    }
    MPI_Cart_shift(cart, 0, 1, &nb[0], &nb[1]);
    MPI_Cart_shift(cart, 1, 1, &nb[2], &nb[3]);
    CHECK(MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, cart) == MPI_SUCCESS,
          "Neighbor_alltoall on a grid");
    int ok = 1;
    for (int j = 0; j < 4; j++) {
        int want = nb[j] == MPI_PROC_NULL ? -1 : nb[j] * 100 + (j ^ 1);
        if (rb[j] != want)
            ok = 0;
    }
    CHECK(ok, "Neighbor_alltoall on a grid: %d %d %d %d", rb[0], rb[1], rb[2], rb[3]);

    /* Neighbor_allgather: everyone's one value. */
    int mine = me + 1000;
    for (int j = 0; j < 4; j++)
        rb[j] = -1;
    MPI_Neighbor_allgather(&mine, 1, MPI_INT, rb, 1, MPI_INT, cart);
    ok = 1;
    for (int j = 0; j < 4; j++)
        if (rb[j] != (nb[j] == MPI_PROC_NULL ? -1 : nb[j] + 1000))
            ok = 0;
    CHECK(ok, "Neighbor_allgather on a grid");

    /* Cart_sub keeping dimension 0: a periodic ring of my column. */
    int keep[2] = {1, 0};
    MPI_Comm col;
    MPI_Cart_sub(cart, keep, &col);
    int csize, crank, cd[1], cp[1], ccoord[1];
    MPI_Comm_size(col, &csize);
    MPI_Comm_rank(col, &crank);
    MPI_Cart_get(col, 1, cd, cp, ccoord);
    CHECK(csize == dims[0] && crank == cc[0] && cd[0] == dims[0] && cp[0] == 1 &&
              ccoord[0] == cc[0],
          "Cart_sub: size %d rank %d dims %d periodic %d", csize, crank, cd[0], cp[0]);
    int sum = 0;
    MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, col);
    int want = 0;
    for (int i = 0; i < dims[0]; i++)
        want += i * dims[1] + cc[1];
    CHECK(sum == want, "a sub-grid communicates: %d vs %d", sum, want);
    MPI_Comm_free(&col);

    /* A duplicate keeps the topology; a split does not. */
    MPI_Comm dup, split;
    MPI_Comm_dup(cart, &dup);
    MPI_Topo_test(dup, &kind);
    CHECK(kind == MPI_CART, "a duplicate of a grid is a grid");
    MPI_Cartdim_get(dup, &nd);
    CHECK(nd == 2, "the duplicate's dimensions");
    MPI_Comm_split(cart, 0, me, &split);
    MPI_Topo_test(split, &kind);
    CHECK(kind == MPI_UNDEFINED, "a split of a grid has no topology");
    MPI_Comm_free(&dup);
    MPI_Comm_free(&split);

    /* Errors. */
    MPI_Comm_set_errhandler(cart, MPI_ERRORS_RETURN);
    int bad[2] = {cc[0], dims[1]};
    expect_fail(MPI_Cart_rank(cart, bad, &r), MPI_ERR_ARG,
                "Cart_rank outside a non-periodic dimension");
    expect_fail(MPI_Cart_shift(cart, 2, 1, &src, &dst), MPI_ERR_ARG,
                "Cart_shift along a third dimension of a 2-D grid");
    expect_fail(MPI_Cart_coords(cart, g_size, 2, cc), MPI_ERR_RANK, "Cart_coords of rank size");
    MPI_Comm_free(&cart);
}

/* A 1-D periodic grid of every process, and of one process per
 * process: both neighbours are one process (MPICH's
 * ring_neighbor_alltoall). */
static void test_ring(void)
{
    int dims[1] = {g_size}, periods[1] = {1};
    MPI_Comm ring;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 1, &ring);
    int sb[2] = {-1, 1}, rb[2] = {0, 0};
    MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, ring);
    CHECK(rb[0] == 1 && rb[1] == -1, "periodic ring of %d: (%d,%d), expected (1,-1)", g_size,
          rb[0], rb[1]);
    MPI_Comm_free(&ring);

    MPI_Comm self_ring;
    dims[0] = 1;
    MPI_Cart_create(MPI_COMM_SELF, 1, dims, periods, 0, &self_ring);
    rb[0] = rb[1] = 0;
    MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, self_ring);
    CHECK(rb[0] == 1 && rb[1] == -1, "periodic ring of one: (%d,%d)", rb[0], rb[1]);
    MPI_Comm_free(&self_ring);
}

/* A grid smaller than the communicator, and one too big. */
static void test_cart_sizes(void)
{
    int dims[1] = {1}, periods[1] = {0};
    MPI_Comm one;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &one);
    CHECK((g_rank == 0) == (one != MPI_COMM_NULL), "a grid of one: COMM_NULL elsewhere");
    if (one != MPI_COMM_NULL) {
        int src, dst;
        MPI_Cart_shift(one, 0, 1, &src, &dst);
        CHECK(src == MPI_PROC_NULL && dst == MPI_PROC_NULL, "a non-periodic grid of one");
        MPI_Comm_free(&one);
    }
    int map = -2;
    dims[0] = 1;
    MPI_Cart_map(MPI_COMM_WORLD, 1, dims, periods, &map);
    CHECK(map == (g_rank == 0 ? 0 : MPI_UNDEFINED), "Cart_map: %d", map);

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm big = MPI_COMM_NULL;
    dims[0] = g_size + 1;
    big = MPI_COMM_SELF;
    expect_fail(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &big), MPI_ERR_ARG,
                "a grid larger than the communicator");
    CHECK(big == MPI_COMM_NULL, "a refused grid leaves MPI_COMM_NULL (MPICH's cartsmall)");
    int zero[2] = {2, 0}, periods2[2] = {0, 0};
    MPI_Comm empty = MPI_COMM_SELF;
    CHECK(MPI_Cart_create(MPI_COMM_WORLD, 2, zero, periods2, 0, &empty) == MPI_SUCCESS &&
              empty == MPI_COMM_NULL,
          "a grid with an extent of 0 is MPI_COMM_NULL everywhere");
    /* The reference MPICH 4.0.2 accepts a negative extent: a NOTE there. */
    int negative[1] = {-1}, cls = -1;
    big = MPI_COMM_NULL;
    int rc = MPI_Cart_create(MPI_COMM_WORLD, 1, negative, periods, 0, &big);
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    CHECK_STD(cls == MPI_ERR_DIMS, "a grid with a negative extent: rc %d class %d", rc, cls);
    if (rc == MPI_SUCCESS && big != MPI_COMM_NULL)
        MPI_Comm_free(&big);
    int kind = 0;
    MPI_Topo_test(MPI_COMM_WORLD, &kind);
    CHECK(kind == MPI_UNDEFINED, "MPI_COMM_WORLD has no topology: %d", kind);
    int nd;
    expect_fail(MPI_Cartdim_get(MPI_COMM_WORLD, &nd), MPI_ERR_TOPOLOGY,
                "Cartdim_get without a grid");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* A graph: each node linked to the next and the previous (a ring, or
 * fewer edges on one or two nodes). */
static void test_graph(void)
{
    int n = g_size;
    int *index = malloc(n * sizeof(int)), *edges = malloc(2 * n * sizeof(int));
    int e = 0;
    for (int i = 0; i < n; i++) {
        if (n > 1)
            edges[e++] = (i + 1) % n;
        if (n > 2)
            edges[e++] = (i + n - 1) % n;
        index[i] = e;
    }
    MPI_Comm g;
    CHECK(MPI_Graph_create(MPI_COMM_WORLD, n, index, edges, 0, &g) == MPI_SUCCESS,
          "Graph_create");
    int kind, nn, ne, cnt, nbs[2];
    MPI_Topo_test(g, &kind);
    CHECK(kind == MPI_GRAPH, "Topo_test of a graph: %d", kind);
    MPI_Graphdims_get(g, &nn, &ne);
    CHECK(nn == n && ne == e, "Graphdims_get %d %d", nn, ne);
    MPI_Graph_neighbors_count(g, g_rank, &cnt);
    int deg = n > 2 ? 2 : n - 1;
    CHECK(cnt == deg, "Graph_neighbors_count %d", cnt);
    MPI_Graph_neighbors(g, g_rank, 2, nbs);
    CHECK(deg < 1 || nbs[0] == (g_rank + 1) % n, "Graph_neighbors");
    int gi[64], ge[128];
    if (n <= 64) {
        MPI_Graph_get(g, n, 2 * n, gi, ge);
        int ok = 1;
        for (int i = 0; i < n; i++)
            if (gi[i] != index[i])
                ok = 0;
        for (int i = 0; i < e; i++)
            if (ge[i] != edges[i])
                ok = 0;
        CHECK(ok, "Graph_get");
    }
    /* Alltoall over the graph: block j to neighbour j, from neighbour j. */
    int sb[2], rb[2] = {-1, -1};
    for (int j = 0; j < deg; j++)
        sb[j] = g_rank * 10 + nbs[j];
    MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, g);
    int ok = 1;
    for (int j = 0; j < deg; j++)
        if (rb[j] != nbs[j] * 10 + g_rank)
            ok = 0;
    CHECK(ok, "Neighbor_alltoall over a graph: %d %d", rb[0], rb[1]);
    MPI_Comm_free(&g);
    free(index);
    free(edges);
}

/* Distributed graphs: a one-way ring given as each process's adjacency,
 * then the same ring given whole by rank 0. */
static void test_dist_graph(void)
{
    int n = g_size, prev = (g_rank + n - 1) % n, next = (g_rank + 1) % n;
    int w_in = 7 + prev, w_out = 7 + g_rank;
    MPI_Comm d;
    CHECK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &prev, &w_in, 1, &next, &w_out,
                                         MPI_INFO_NULL, 0, &d) == MPI_SUCCESS,
          "Dist_graph_create_adjacent");
    int kind, indeg, outdeg, weighted;
    MPI_Topo_test(d, &kind);
    CHECK(kind == MPI_DIST_GRAPH, "Topo_test of a distributed graph: %d", kind);
    MPI_Dist_graph_neighbors_count(d, &indeg, &outdeg, &weighted);
    CHECK(indeg == 1 && outdeg == 1 && weighted, "Dist_graph_neighbors_count %d %d %d", indeg,
          outdeg, weighted);
    int s = -1, sw = -1, t = -1, tw = -1;
    MPI_Dist_graph_neighbors(d, 1, &s, &sw, 1, &t, &tw);
    CHECK(s == prev && sw == w_in && t == next && tw == w_out, "Dist_graph_neighbors");
    /* Alltoallv: two ints to the next process, from the previous. */
    int sb[2] = {g_rank, -g_rank}, rb[3] = {-9, -9, -9}, sc = 2, sd = 0, rc = 2, rd = 1;
    MPI_Neighbor_alltoallv(sb, &sc, &sd, MPI_INT, rb, &rc, &rd, MPI_INT, d);
    CHECK(rb[0] == -9 && rb[1] == prev && rb[2] == -prev, "Neighbor_alltoallv: %d %d %d",
          rb[0], rb[1], rb[2]);
    /* Alltoallw with a strided type on the receive side. */
    MPI_Datatype every_other;
    MPI_Type_vector(2, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    int r4[4] = {-5, -5, -5, -5};
    MPI_Aint sdw = 0, rdw = 0;
    int one = 1;
    MPI_Datatype ti = MPI_INT;
    sc = 2;
    MPI_Neighbor_alltoallw(sb, &sc, &sdw, &ti, r4, &one, &rdw, &every_other, d);
    CHECK(r4[0] == prev && r4[1] == -5 && r4[2] == -prev && r4[3] == -5,
          "Neighbor_alltoallw into a vector: %d %d %d %d", r4[0], r4[1], r4[2], r4[3]);
    MPI_Type_free(&every_other);
    MPI_Comm_free(&d);

    /* The general form: rank 0 gives every edge, unweighted. */
    int *srcs = NULL, *degs = NULL, *dsts = NULL, k = 0;
    if (g_rank == 0) {
        k = n;
        srcs = malloc(n * sizeof(int));
        degs = malloc(n * sizeof(int));
        dsts = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) {
            srcs[i] = i;
            degs[i] = 1;
            dsts[i] = (i + 1) % n;
        }
    }
    CHECK(MPI_Dist_graph_create(MPI_COMM_WORLD, k, srcs, degs, dsts, MPI_UNWEIGHTED,
                                MPI_INFO_NULL, 0, &d) == MPI_SUCCESS,
          "Dist_graph_create");
    MPI_Dist_graph_neighbors_count(d, &indeg, &outdeg, &weighted);
    CHECK(indeg == 1 && outdeg == 1 && !weighted, "Dist_graph_create's counts %d %d %d",
          indeg, outdeg, weighted);
    MPI_Dist_graph_neighbors(d, 1, &s, MPI_UNWEIGHTED, 1, &t, MPI_UNWEIGHTED);
    CHECK(s == prev && t == next, "Dist_graph_create's neighbours %d %d", s, t);
    int mine = g_rank + 50, got = -1;
    MPI_Neighbor_allgather(&mine, 1, MPI_INT, &got, 1, MPI_INT, d);
    CHECK(got == prev + 50, "Neighbor_allgather over a distributed graph: %d", got);
    int rcount = 1, rdisp = 0;
    got = -1;
    MPI_Neighbor_allgatherv(&mine, 1, MPI_INT, &got, &rcount, &rdisp, MPI_INT, d);
    CHECK(got == prev + 50, "Neighbor_allgatherv over a distributed graph: %d", got);
    MPI_Comm_free(&d);
    free(srcs);
    free(degs);
    free(dsts);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    test_cart();
    test_ring();
    test_cart_sizes();
    test_graph();
    test_dist_graph();
    return finish("topo");
}
