/*
 * comm.c - communicator management and attribute caching.
 *
 * run-sizes: 1 2 3 4   (any n >= 1)
 *
 * Covers: Comm_dup (traffic on the dup is isolated from WORLD), Comm_split_type
 * (each kind: SHARED, HW_GUIDED with and without its info key, HW_UNGUIDED,
 * MPI_UNDEFINED, an unknown kind), Comm_split by
 * parity with key = -rank (reversed order) plus p2p, Allreduce, Bcast,
 * Barrier and Allgather on the split, Comm_split with MPI_UNDEFINED giving
 * MPI_COMM_NULL, Comm_compare (IDENT / CONGRUENT / SIMILAR / UNEQUAL),
 * Comm_free, MPI_COMM_SELF (Isend to self, Allreduce), attribute caching
 * (Comm_create_keyval with copy and delete callbacks, set/get/delete_attr,
 * Comm_free_keyval, delete callback at Comm_free, copy callback at
 * Comm_dup), nested split of a split communicator, 2000 communicators
 * live at once (and a failing MPI_Comm_idup past the last reports it by
 * its request).
 */
#include "common.h"

static int rank, size, left, right;

static void test_dup(void)
{
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int drank = -1, dsize = -1;
    MPI_Comm_rank(dup, &drank);
    MPI_Comm_size(dup, &dsize);
    CHECK(drank == rank && dsize == size, "dup rank %d size %d", drank, dsize);
    CHECK(dup != MPI_COMM_WORLD, "Comm_dup returned MPI_COMM_WORLD itself");

    /* Same source, same tag, different communicators: the message sent
     * first (on the dup) must not match a receive posted on WORLD. */
    int a = rank * 10 + 1, b = rank * 10 + 2;
    MPI_Request sr[2];
    MPI_Isend(&a, 1, MPI_INT, right, 5, dup, &sr[0]);
    MPI_Isend(&b, 1, MPI_INT, right, 5, MPI_COMM_WORLD, &sr[1]);
    int ga = -1, gb = -1;
    MPI_Status st;
    MPI_Recv(&gb, 1, MPI_INT, left, 5, MPI_COMM_WORLD, &st);
    CHECK(gb == left * 10 + 2, "WORLD receive matched the dup message (%d)", gb);
    MPI_Recv(&ga, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &st);
    CHECK(ga == left * 10 + 1 && st.MPI_SOURCE == left && st.MPI_TAG == 5,
          "dup receive got %d from %d tag %d", ga, st.MPI_SOURCE, st.MPI_TAG);
    MPI_Waitall(2, sr, MPI_STATUSES_IGNORE);

    /* Collectives on the dup interleaved with WORLD. */
    int x = rank + 1, y = -1, z = -1;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, dup);
    MPI_Allreduce(&x, &z, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(y == size * (size + 1) / 2 && z == size, "Allreduce on dup %d / world %d", y, z);

    int result = -1;
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &result);
    CHECK(result == MPI_IDENT, "compare(world, world) = %d", result);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &result);
    CHECK(result == MPI_CONGRUENT, "compare(world, dup) = %d", result);
    MPI_Comm_compare(dup, dup, &result);
    CHECK(result == MPI_IDENT, "compare(dup, dup) = %d", result);

    /* A dup of a dup. */
    MPI_Comm dup2;
    MPI_Comm_dup(dup, &dup2);
    MPI_Comm_compare(dup, dup2, &result);
    CHECK(result == MPI_CONGRUENT, "compare(dup, dup2) = %d", result);
    MPI_Barrier(dup2);
    MPI_Comm_free(&dup2);
    CHECK(dup2 == MPI_COMM_NULL, "Comm_free did not set MPI_COMM_NULL");

    MPI_Comm_free(&dup);
    CHECK(dup == MPI_COMM_NULL, "Comm_free did not set MPI_COMM_NULL");
}

static void test_split(void)
{
    int color = rank % 2;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, color, -rank, &sub);
    CHECK(sub != MPI_COMM_NULL, "split returned MPI_COMM_NULL");
    if (sub == MPI_COMM_NULL)
        return;
    int srank = -1, ssize = -1;
    MPI_Comm_rank(sub, &srank);
    MPI_Comm_size(sub, &ssize);
    int esize = 0, erank = 0;
    for (int r = 0; r < size; r++)
        if (r % 2 == color) {
            esize++;
            if (r > rank)
                erank++; /* key = -rank: higher world ranks come first */
        }
    CHECK(ssize == esize && srank == erank, "split: rank %d size %d, expected %d %d", srank,
          ssize, erank, esize);

    /* World rank of sub rank k is the k-th largest rank with this parity. */
    int *members = malloc(esize * sizeof(int)), k = 0;
    for (int r = size - 1; r >= 0; r--)
        if (r % 2 == color)
            members[k++] = r;

    /* Ring on the split. */
    int sright = (srank + 1) % ssize, sleft = (srank + ssize - 1) % ssize;
    int v = rank * 100, w = -1;
    MPI_Status st;
    MPI_Sendrecv(&v, 1, MPI_INT, sright, 9, &w, 1, MPI_INT, sleft, 9, sub, &st);
    CHECK(w == members[sleft] * 100 && st.MPI_SOURCE == sleft,
          "split ring got %d from %d (expected %d from %d)", w, st.MPI_SOURCE,
          members[sleft] * 100, sleft);

    int sum = -1, esum = 0;
    for (int i = 0; i < esize; i++)
        esum += members[i];
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, sub);
    CHECK(sum == esum, "split Allreduce %d expected %d", sum, esum);

    int bc = srank == 0 ? rank + 1000 : -1;
    MPI_Bcast(&bc, 1, MPI_INT, 0, sub);
    CHECK(bc == members[0] + 1000, "split Bcast %d expected %d", bc, members[0] + 1000);

    MPI_Barrier(sub);

    int *all = malloc(esize * sizeof(int));
    MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, sub);
    int ok = 1;
    for (int i = 0; i < esize; i++)
        if (all[i] != members[i])
            ok = 0;
    CHECK(ok, "split Allgather not in descending world-rank order");

    int result = -1;
    MPI_Comm_compare(MPI_COMM_WORLD, sub, &result);
    if (size == 1)
        CHECK(result == MPI_CONGRUENT, "compare(world, split) with n=1 = %d", result);
    else
        CHECK(result == MPI_UNEQUAL, "compare(world, parity split) = %d", result);

    /* Nested split of the split: halves. */
    MPI_Comm nested;
    int half = srank < (ssize + 1) / 2 ? 0 : 1;
    MPI_Comm_split(sub, half, srank, &nested);
    int nrank = -1, nsize = -1;
    MPI_Comm_rank(nested, &nrank);
    MPI_Comm_size(nested, &nsize);
    int first = (ssize + 1) / 2;
    int ensize = half == 0 ? first : ssize - first;
    int enrank = half == 0 ? srank : srank - first;
    CHECK(nrank == enrank && nsize == ensize, "nested split rank %d size %d (expected %d %d)",
          nrank, nsize, enrank, ensize);
    int nsum = -1, ensum = 0;
    for (int i = 0; i < esize; i++)
        if ((i < first ? 0 : 1) == half)
            ensum += members[i];
    MPI_Allreduce(&rank, &nsum, 1, MPI_INT, MPI_SUM, nested);
    CHECK(nsum == ensum, "nested Allreduce %d expected %d", nsum, ensum);
    MPI_Comm_free(&nested);

    MPI_Comm_free(&sub);
    CHECK(sub == MPI_COMM_NULL, "Comm_free(split) did not set MPI_COMM_NULL");
    free(all);
    free(members);

    /* Same members, reversed order: SIMILAR (CONGRUENT when n == 1). */
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    int rrank = -1;
    MPI_Comm_rank(rev, &rrank);
    CHECK(rrank == size - 1 - rank, "reversed split rank %d", rrank);
    MPI_Comm_compare(MPI_COMM_WORLD, rev, &result);
    CHECK(result == (size == 1 ? MPI_CONGRUENT : MPI_SIMILAR), "compare(world, reversed) = %d",
          result);
    MPI_Comm_free(&rev);

    /* Same order, same color for all: CONGRUENT. */
    MPI_Comm same;
    MPI_Comm_split(MPI_COMM_WORLD, 7, 0, &same);
    MPI_Comm_compare(MPI_COMM_WORLD, same, &result);
    CHECK(result == MPI_CONGRUENT, "compare(world, split same order) = %d", result);
    int srk = -1;
    MPI_Comm_rank(same, &srk);
    CHECK(srk == rank, "equal keys keep world order: rank %d", srk);
    MPI_Comm_free(&same);

    /* MPI_UNDEFINED color gives MPI_COMM_NULL. */
    MPI_Comm part;
    int c = rank % 3 == 2 ? MPI_UNDEFINED : 0;
    MPI_Comm_split(MPI_COMM_WORLD, c, rank, &part);
    if (c == MPI_UNDEFINED) {
        CHECK(part == MPI_COMM_NULL, "UNDEFINED color did not give MPI_COMM_NULL");
    } else {
        CHECK(part != MPI_COMM_NULL, "defined color gave MPI_COMM_NULL");
        int psize = -1, esz = 0;
        for (int r = 0; r < size; r++)
            if (r % 3 != 2)
                esz++;
        MPI_Comm_size(part, &psize);
        CHECK(psize == esz, "partial split size %d expected %d", psize, esz);
        MPI_Barrier(part);
        MPI_Comm_free(&part);
    }
    /* Everyone UNDEFINED. */
    MPI_Comm none;
    MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, 0, &none);
    CHECK(none == MPI_COMM_NULL, "all-UNDEFINED split gave a communicator");
}

static void test_self(void)
{
    int srank = -1, ssize = -1;
    MPI_Comm_rank(MPI_COMM_SELF, &srank);
    MPI_Comm_size(MPI_COMM_SELF, &ssize);
    CHECK(srank == 0 && ssize == 1, "COMM_SELF rank %d size %d", srank, ssize);

    int v[100], w[100];
    for (int i = 0; i < 100; i++)
        v[i] = rank * 1000 + i;
    MPI_Request rq;
    MPI_Status st;
    MPI_Isend(v, 100, MPI_INT, 0, 3, MPI_COMM_SELF, &rq);
    MPI_Recv(w, 100, MPI_INT, 0, 3, MPI_COMM_SELF, &st);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 3, "self recv status src %d tag %d",
          st.MPI_SOURCE, st.MPI_TAG);
    CHECK(memcmp(v, w, sizeof v) == 0, "self send data");

    int x = rank + 5, y = -1;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
    CHECK(y == rank + 5, "Allreduce on COMM_SELF %d", y);
    MPI_Barrier(MPI_COMM_SELF);
    int b = rank;
    MPI_Bcast(&b, 1, MPI_INT, 0, MPI_COMM_SELF);
    CHECK(b == rank, "Bcast on COMM_SELF");

    int result = -1;
    MPI_Comm_compare(MPI_COMM_SELF, MPI_COMM_WORLD, &result);
    CHECK(result == (size == 1 ? MPI_CONGRUENT : MPI_UNEQUAL), "compare(self, world) = %d",
          result);

    MPI_Comm sdup;
    MPI_Comm_dup(MPI_COMM_SELF, &sdup);
    y = -1;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, sdup);
    CHECK(y == x, "Allreduce on dup of COMM_SELF");
    MPI_Comm_free(&sdup);
}

/* Attribute callbacks. */
static int delete_calls = 0, copy_calls = 0;
static int last_deleted = -1;

static int del_fn(MPI_Comm comm, int keyval, void *attr_val, void *extra)
{
    (void)comm;
    (void)keyval;
    delete_calls++;
    last_deleted = (int)(intptr_t)attr_val;
    if (extra != (void *)&delete_calls)
        last_deleted = -999; /* extra_state not passed through */
    return MPI_SUCCESS;
}

static int copy_fn(MPI_Comm oldcomm, int keyval, void *extra, void *in, void *out, int *flag)
{
    (void)oldcomm;
    (void)keyval;
    (void)extra;
    copy_calls++;
    *(void **)out = (void *)((intptr_t)in + 1); /* copies are marked by +1 */
    *flag = 1;
    return MPI_SUCCESS;
}

static void test_attributes(void)
{
    int key = MPI_KEYVAL_INVALID, key2 = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(copy_fn, del_fn, &key, &delete_calls);
    CHECK(key != MPI_KEYVAL_INVALID, "Comm_create_keyval gave MPI_KEYVAL_INVALID");
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &key2, NULL);
    CHECK(key2 != key, "two keyvals are equal");

    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);

    void *val = NULL;
    int flag = -1;
    MPI_Comm_get_attr(c, key, &val, &flag);
    CHECK(flag == 0, "get_attr before set: flag %d", flag);

    MPI_Comm_set_attr(c, key, (void *)(intptr_t)100);
    MPI_Comm_set_attr(c, key2, (void *)(intptr_t)555);
    flag = 0;
    MPI_Comm_get_attr(c, key, &val, &flag);
    CHECK(flag && (intptr_t)val == 100, "get_attr: flag %d val %ld", flag, (long)(intptr_t)val);
    CHECK(delete_calls == 0, "delete called %d times before any delete", delete_calls);

    /* Overwriting calls delete on the old value. */
    MPI_Comm_set_attr(c, key, (void *)(intptr_t)200);
    CHECK(delete_calls == 1 && last_deleted == 100, "overwrite: delete calls %d, last %d",
          delete_calls, last_deleted);

    /* Explicit delete. */
    MPI_Comm_delete_attr(c, key);
    CHECK(delete_calls == 2 && last_deleted == 200, "delete_attr: calls %d, last %d",
          delete_calls, last_deleted);
    flag = -1;
    MPI_Comm_get_attr(c, key, &val, &flag);
    CHECK(flag == 0, "get_attr after delete: flag %d", flag);

    /* Copy callback runs at Comm_dup; the NULL_COPY key is not copied. */
    MPI_Comm_set_attr(c, key, (void *)(intptr_t)300);
    MPI_Comm c2;
    MPI_Comm_dup(c, &c2);
    CHECK(copy_calls == 1, "copy callback called %d times", copy_calls);
    flag = 0;
    MPI_Comm_get_attr(c2, key, &val, &flag);
    CHECK(flag && (intptr_t)val == 301, "copied attribute: flag %d val %ld", flag,
          (long)(intptr_t)val);
    flag = -1;
    MPI_Comm_get_attr(c2, key2, &val, &flag);
    CHECK(flag == 0, "NULL_COPY_FN attribute was copied");
    flag = 0;
    MPI_Comm_get_attr(c, key2, &val, &flag);
    CHECK(flag && (intptr_t)val == 555, "key2 on original: flag %d", flag);

    /* Free the keyval while still attached: attributes stay usable. */
    int key_saved = key;
    MPI_Comm_free_keyval(&key);
    CHECK(key == MPI_KEYVAL_INVALID, "Comm_free_keyval did not reset the handle");
    flag = 0;
    MPI_Comm_get_attr(c, key_saved, &val, &flag);
    CHECK(flag && (intptr_t)val == 300, "attribute after free_keyval: flag %d", flag);

    /* Comm_free runs the delete callback for each attached attribute. */
    int before = delete_calls;
    MPI_Comm_free(&c2);
    CHECK(delete_calls == before + 1 && last_deleted == 301,
          "Comm_free(c2): delete calls %d (expected %d), last %d", delete_calls, before + 1,
          last_deleted);
    MPI_Comm_free(&c);
    CHECK(delete_calls == before + 2 && last_deleted == 300,
          "Comm_free(c): delete calls %d (expected %d), last %d", delete_calls, before + 2,
          last_deleted);
    MPI_Comm_free_keyval(&key2);

    /* Attributes on MPI_COMM_WORLD itself, with a fresh key. */
    int key3;
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &key3, NULL);
    MPI_Comm_set_attr(MPI_COMM_WORLD, key3, (void *)(intptr_t)(rank + 7));
    MPI_Comm c3;
    MPI_Comm_dup(MPI_COMM_WORLD, &c3);
    flag = 0;
    MPI_Comm_get_attr(c3, key3, &val, &flag);
    CHECK(flag && (intptr_t)val == rank + 7, "MPI_COMM_DUP_FN copy: flag %d val %ld", flag,
          (long)(intptr_t)val);
    MPI_Comm_free(&c3);
    MPI_Comm_delete_attr(MPI_COMM_WORLD, key3);
    MPI_Comm_free_keyval(&key3);
}

/* A key the program freed lives on while attributes use it: a duplicate
 * still runs its copy callback, freeing a communicator or datatype still
 * runs its delete callback, MPI_Comm_delete_attr with the saved key works,
 * and freeing it again (its own delete callback does) is not an error. */
static int counted = 0;
static int count_copy(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c, (void)k, (void)extra;
    counted++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}
static int count_delete(MPI_Comm c, int k, void *val, void *extra)
{
    (void)c, (void)val, (void)extra;
    counted--;
    MPI_Comm_free_keyval(&k); /* a second free of the same key: allowed */
    return MPI_SUCCESS;
}
static int type_delete(MPI_Datatype t, int k, void *val, void *extra)
{
    (void)t, (void)k, (void)extra;
    *(int *)val += 1;
    return MPI_SUCCESS;
}

static void test_freed_keys(void)
{
    MPI_Comm base, copy;
    MPI_Comm_dup(MPI_COMM_WORLD, &base);
    int key, saved;
    MPI_Comm_create_keyval(count_copy, count_delete, &key, NULL);
    saved = key;
    counted = 1;
    MPI_Comm_set_attr(base, key, &counted);
    CHECK(MPI_Comm_free_keyval(&key) == MPI_SUCCESS && key == MPI_KEYVAL_INVALID,
          "freeing a key in use");
    CHECK(MPI_Comm_dup(base, &copy) == MPI_SUCCESS, "dup after the key was freed");
    CHECK(counted == 2, "the freed key's copy callback ran: %d", counted);
    void *v = NULL;
    int flag = 0;
    MPI_Comm_get_attr(copy, saved, &v, &flag);
    CHECK(flag && v == &counted, "the duplicate holds the attribute of a freed key");
    MPI_Comm_free(&copy);
    CHECK(counted == 1, "freeing the duplicate ran the delete callback: %d", counted);
    CHECK(MPI_Comm_delete_attr(base, saved) == MPI_SUCCESS && counted == 0,
          "deleting with the saved key: %d", counted);
    MPI_Comm_free(&base);

    /* A datatype's attribute keeps its freed key alive too. */
    MPI_Datatype t;
    MPI_Type_contiguous(2, MPI_INT, &t);
    int tkey, deleted = 0;
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, type_delete, &tkey, NULL);
    MPI_Type_set_attr(t, tkey, &deleted);
    MPI_Type_free_keyval(&tkey);
    MPI_Type_free(&t);
    CHECK(deleted == 1, "freeing a datatype ran the delete callback of a freed key: %d",
          deleted);
}

/* A copy callback that fails makes the duplicate fail: MPI_Comm_dup and
 * MPI_Type_dup return the error and the null handle, and the attributes
 * already copied to the half-made duplicate are deleted again (their
 * delete callbacks run); the original keeps its attributes. */
static int refused_deletes = 0;
static int copy_ok(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c, (void)k, (void)extra;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}
static int copy_refuse(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c, (void)k, (void)extra, (void)in, (void)out;
    *flag = 0;
    return MPI_ERR_OTHER;
}
static int count_del(MPI_Comm c, int k, void *val, void *extra)
{
    (void)c, (void)k, (void)val, (void)extra;
    refused_deletes++;
    return MPI_SUCCESS;
}
static int type_copy_refuse(MPI_Datatype t, int k, void *extra, void *in, void *out, int *flag)
{
    (void)t, (void)k, (void)extra, (void)in, (void)out;
    *flag = 0;
    return MPI_ERR_OTHER;
}

static void test_refused_copy(void)
{
    MPI_Comm base, copy = MPI_COMM_WORLD;
    MPI_Comm_dup(MPI_COMM_WORLD, &base);
    MPI_Comm_set_errhandler(base, MPI_ERRORS_RETURN);
    int ok_key, bad_key;
    /* Keys are copied in creation order: the first copies, the second
     * refuses. */
    MPI_Comm_create_keyval(copy_ok, count_del, &ok_key, NULL);
    MPI_Comm_create_keyval(copy_refuse, MPI_COMM_NULL_DELETE_FN, &bad_key, NULL);
    MPI_Comm_set_attr(base, ok_key, &refused_deletes);
    MPI_Comm_set_attr(base, bad_key, &refused_deletes);
    refused_deletes = 0;
    int err = MPI_Comm_dup(base, &copy);
    CHECK(err != MPI_SUCCESS, "MPI_Comm_dup succeeded although a copy callback failed");
    CHECK(copy == MPI_COMM_NULL, "a failed MPI_Comm_dup left %#x, not MPI_COMM_NULL",
          (unsigned)copy);
    if (!g_lenient_ref)
        CHECK(refused_deletes == 1, "the attribute copied to the failed duplicate was "
              "deleted %d times, not once", refused_deletes);
    void *v = NULL;
    int flag = 0;
    MPI_Comm_get_attr(base, ok_key, &v, &flag);
    CHECK(flag && v == &refused_deletes, "the original lost its attribute");
    MPI_Comm_delete_attr(base, bad_key);
    MPI_Comm_free(&base);
    MPI_Comm_free_keyval(&ok_key);
    MPI_Comm_free_keyval(&bad_key);

    MPI_Datatype t, t2 = MPI_INT;
    MPI_Type_contiguous(2, MPI_INT, &t);
    int tkey;
    MPI_Type_create_keyval(type_copy_refuse, MPI_TYPE_NULL_DELETE_FN, &tkey, NULL);
    MPI_Type_set_attr(t, tkey, NULL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    err = MPI_Type_dup(t, &t2);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    CHECK(err != MPI_SUCCESS, "MPI_Type_dup succeeded although a copy callback failed");
    CHECK(t2 == MPI_DATATYPE_NULL, "a failed MPI_Type_dup left %#x, not MPI_DATATYPE_NULL",
          (unsigned)t2);
    MPI_Type_free(&t);
    MPI_Type_free_keyval(&tkey);
}

/* A key made for one kind of object is refused on another (MPI_ERR_KEYVAL):
 * a datatype's key on a communicator, a communicator's on a datatype, and
 * each kind's free of the other's. */
static void test_key_kinds(void)
{
    int ckey, tkey, cls = -1, v = 0;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &ckey, NULL);
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &tkey, NULL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Error_class(MPI_Comm_set_attr(MPI_COMM_WORLD, tkey, &v), &cls);
    CHECK(cls == MPI_ERR_KEYVAL, "a datatype's key on a communicator: class %d", cls);
    MPI_Error_class(MPI_Type_set_attr(MPI_INT, ckey, &v), &cls);
    CHECK(cls == MPI_ERR_KEYVAL, "a communicator's key on a datatype: class %d", cls);
    int k = tkey;
    MPI_Error_class(MPI_Comm_free_keyval(&k), &cls);
    CHECK(cls == MPI_ERR_KEYVAL && k == tkey, "MPI_Comm_free_keyval of a datatype's key: class %d",
          cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    CHECK_MPI(MPI_Type_free_keyval(&tkey));
    CHECK_MPI(MPI_Comm_free_keyval(&ckey));
}

/* As many communicators as the library has contexts for: 2000 live at
 * once, as MPICH allows (tandem made 253 before); one past the last
 * refused with an error (not a crash, not a hang), and every one usable. */
#define MANY 2000
static void test_many(void)
{
    static MPI_Comm c[MANY + 64];
    int made = 0, rc = MPI_SUCCESS;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    while (made < MANY + 64) {
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &c[made]);
        if (rc != MPI_SUCCESS)
            break;
        made++;
    }
    CHECK(made >= MANY, "only %d communicators at once", made);
    if (made < MANY + 64) {
        int cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_OTHER || cls == MPI_ERR_INTERN || cls == MPI_ERR_COMM,
              "the one past the last: class %d", cls);
    }
    /* A non-blocking duplicate past the last: its request fails (the
     * call itself returns, as MPICH's does). */
    if (made < MANY + 64) {
        MPI_Comm x = MPI_COMM_NULL;
        MPI_Request rq = MPI_REQUEST_NULL;
        int rc1 = MPI_Comm_idup(MPI_COMM_WORLD, &x, &rq);
        int rc2 = rc1 == MPI_SUCCESS ? MPI_Wait(&rq, MPI_STATUS_IGNORE) : rc1;
        CHECK(rc1 == MPI_SUCCESS && rc2 != MPI_SUCCESS,
              "Comm_idup past the last: call %d, wait %d", rc1, rc2);
        CHECK_STD(x == MPI_COMM_NULL, "a failed Comm_idup left a communicator");
    }
    /* The newest and the oldest carry traffic and collectives. */
    for (int k = 0; k < 2 && made > 0; k++) {
        MPI_Comm x = k ? c[made - 1] : c[0];
        int sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, x);
        CHECK(sum == size * (size - 1) / 2, "Allreduce on communicator %d: %d", k, sum);
        int v = -1;
        MPI_Sendrecv(&rank, 1, MPI_INT, right, 4, &v, 1, MPI_INT, left, 4, x, MPI_STATUS_IGNORE);
        CHECK(v == left, "Sendrecv on communicator %d: %d", k, v);
    }
    for (int i = 0; i < made; i++)
        MPI_Comm_free(&c[i]);
    /* Their contexts are free again. */
    MPI_Comm d;
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &d) == MPI_SUCCESS, "Comm_dup after freeing them");
    MPI_Comm_free(&d);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* MPI_Comm_split_type's kinds on MPI_COMM_WORLD, all of whose ranks share
 * one host here: MPI_COMM_TYPE_SHARED and MPI_COMM_TYPE_HW_GUIDED with
 * mpi_hw_resource_type = mpi_shared_memory give the whole world (ranks
 * ordered by key); HW_GUIDED without the key (MPI_INFO_NULL) or with a
 * resource it does not know, HW_UNGUIDED (nothing smaller than the world
 * to split it into) and MPI_UNDEFINED give MPI_COMM_NULL; an unknown kind
 * fails with MPI_ERR_ARG. */
static void test_split_type(void)
{
    MPI_Comm c = MPI_COMM_NULL;
    int n = -1, r = -1;
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, size - rank, MPI_INFO_NULL,
                                  &c));
    CHECK(c != MPI_COMM_NULL, "split_type SHARED: MPI_COMM_NULL");
    MPI_Comm_size(c, &n);
    MPI_Comm_rank(c, &r);
    CHECK(n == size && r == size - 1 - rank, "split_type SHARED: size %d rank %d", n, r);
    MPI_Comm_free(&c);

    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory");
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, info, &c));
    CHECK_STD(c != MPI_COMM_NULL, "split_type HW_GUIDED mpi_shared_memory: MPI_COMM_NULL");
    if (c != MPI_COMM_NULL) {
        MPI_Comm_size(c, &n);
        MPI_Comm_rank(c, &r);
        CHECK(n == size && r == rank, "split_type HW_GUIDED: size %d rank %d", n, r);
        MPI_Comm_free(&c);
    }
    MPI_Info_set(info, "mpi_hw_resource_type", "no such resource");
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, info, &c));
    CHECK(c == MPI_COMM_NULL, "split_type HW_GUIDED with an unknown resource");
    MPI_Info_free(&info);
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, MPI_INFO_NULL,
                                  &c));
    CHECK_STD(c == MPI_COMM_NULL, "split_type HW_GUIDED with MPI_INFO_NULL");
    if (c != MPI_COMM_NULL)
        MPI_Comm_free(&c);
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, rank, MPI_INFO_NULL,
                                  &c));
    CHECK_STD(c == MPI_COMM_NULL, "split_type HW_UNGUIDED of one host's ranks");
    if (c != MPI_COMM_NULL)
        MPI_Comm_free(&c);
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, rank, MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL, "split_type MPI_UNDEFINED");

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, 12345, rank, MPI_INFO_NULL, &c), cls = -1;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    CHECK_STD(rc != MPI_SUCCESS && cls == MPI_ERR_ARG, "split_type 12345: rc %d class %d", rc, cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_setup();
    rank = g_rank;
    size = g_size;
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;

    test_dup();
    MPI_Barrier(MPI_COMM_WORLD);
    test_split_type();
    MPI_Barrier(MPI_COMM_WORLD);
    test_split();
    MPI_Barrier(MPI_COMM_WORLD);
    test_self();
    MPI_Barrier(MPI_COMM_WORLD);
    test_attributes();
    test_freed_keys();
    test_refused_copy();
    test_key_kinds();
    test_many();
    return finish("comm");
}
