/*
 * Parallel HDF5 (Debian's libhdf5-mpich, built for MPICH's ABI) on top of
 * the MPI library's MPI-IO: a program nobody here wrote the I/O layer of.
 * Each rank writes its block of rows and its set of columns (a strided
 * hyperslab: a non-contiguous file view) of two datasets collectively,
 * part of a chunked dataset independently, and an attribute; then every
 * rank reopens the file read-only and checks every value.
 * Usage: phdf5 FILE
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 64 /* per rank */
#define COLS 48

static int rank, size, errs;

static double val(int set, long r, long c) { return set * 1e6 + r * 1000.0 + c; }

#define CHECK_H5(x)                                                              \
    do {                                                                         \
        if ((x) < 0) {                                                           \
            fprintf(stderr, "rank %d: %s failed at line %d\n", rank, #x, __LINE__); \
            errs++;                                                              \
        }                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *name = argc > 1 ? argv[1] : "phdf5-test.h5";
    hsize_t dims[2] = {(hsize_t)ROWS * size, (hsize_t)COLS * size};

    /* ---- write ---- */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK_H5(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    hid_t file = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK_H5(file);
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t coll = H5Pcreate(H5P_DATASET_XFER);
    CHECK_H5(H5Pset_dxpl_mpio(coll, H5FD_MPIO_COLLECTIVE));

    /* Rows: rank r owns rows r*ROWS .. (r+1)*ROWS - 1. */
    hid_t rows = H5Dcreate2(file, "rows", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT);
    double *buf = malloc(sizeof(double) * ROWS * dims[1]);
    for (long r = 0; r < ROWS; r++)
        for (long c = 0; c < (long)dims[1]; c++)
            buf[r * dims[1] + c] = val(1, rank * ROWS + r, c);
    hsize_t start[2] = {(hsize_t)rank * ROWS, 0}, count[2] = {ROWS, dims[1]};
    hid_t fs = H5Dget_space(rows);
    CHECK_H5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL));
    hid_t ms = H5Screate_simple(2, count, NULL);
    CHECK_H5(H5Dwrite(rows, H5T_NATIVE_DOUBLE, ms, fs, coll, buf));
    H5Sclose(ms);
    H5Sclose(fs);

    /* Columns: rank r owns columns r, r + size, r + 2 size, ... */
    hid_t cols = H5Dcreate2(file, "cols", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT);
    int *ibuf = malloc(sizeof(int) * dims[0] * COLS);
    for (long r = 0; r < (long)dims[0]; r++)
        for (long k = 0; k < COLS; k++)
            ibuf[r * COLS + k] = (int)(r * 10000 + k * size + rank);
    hsize_t cstart[2] = {0, (hsize_t)rank}, cstride[2] = {1, (hsize_t)size},
            ccount[2] = {dims[0], COLS};
    fs = H5Dget_space(cols);
    CHECK_H5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, cstart, cstride, ccount, NULL));
    ms = H5Screate_simple(2, ccount, NULL);
    CHECK_H5(H5Dwrite(cols, H5T_NATIVE_INT, ms, fs, coll, ibuf));
    H5Sclose(ms);
    H5Sclose(fs);

    /* Chunked, written independently: rank r writes a 16 x 16 tile. */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[2] = {16, 16};
    CHECK_H5(H5Pset_chunk(dcpl, 2, chunk));
    hid_t chunked = H5Dcreate2(file, "chunked", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl,
                               H5P_DEFAULT);
    double tile[16 * 16];
    for (int i = 0; i < 256; i++)
        tile[i] = val(3, rank, i);
    hsize_t tstart[2] = {(hsize_t)rank * 16, (hsize_t)rank * 16}, tcount[2] = {16, 16};
    fs = H5Dget_space(chunked);
    CHECK_H5(H5Sselect_hyperslab(fs, H5S_SELECT_SET, tstart, NULL, tcount, NULL));
    ms = H5Screate_simple(2, tcount, NULL);
    CHECK_H5(H5Dwrite(chunked, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, tile));
    H5Sclose(ms);
    H5Sclose(fs);

    /* An attribute (written by every rank, same value: HDF5's rule). */
    hid_t as = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(rows, "ranks", H5T_NATIVE_INT, as, H5P_DEFAULT, H5P_DEFAULT);
    CHECK_H5(H5Awrite(attr, H5T_NATIVE_INT, &size));
    H5Aclose(attr);
    H5Sclose(as);

    H5Pclose(dcpl);
    H5Dclose(chunked);
    H5Dclose(cols);
    H5Dclose(rows);
    H5Sclose(space);
    H5Pclose(coll);
    CHECK_H5(H5Fclose(file));

    /* ---- read back, everything, on every rank ---- */
    file = H5Fopen(name, H5F_ACC_RDONLY, fapl);
    CHECK_H5(file);
    rows = H5Dopen2(file, "rows", H5P_DEFAULT);
    double *all = malloc(sizeof(double) * dims[0] * dims[1]);
    CHECK_H5(H5Dread(rows, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, all));
    long bad = 0;
    for (long r = 0; r < (long)dims[0]; r++)
        for (long c = 0; c < (long)dims[1]; c++)
            bad += all[r * dims[1] + c] != val(1, r, c);
    if (bad)
        fprintf(stderr, "rank %d: rows: %ld wrong values\n", rank, bad), errs++;
    int nr = 0;
    attr = H5Aopen(rows, "ranks", H5P_DEFAULT);
    CHECK_H5(H5Aread(attr, H5T_NATIVE_INT, &nr));
    if (nr != size)
        fprintf(stderr, "rank %d: attribute %d\n", rank, nr), errs++;
    H5Aclose(attr);
    H5Dclose(rows);

    cols = H5Dopen2(file, "cols", H5P_DEFAULT);
    int *iall = malloc(sizeof(int) * dims[0] * dims[1]);
    CHECK_H5(H5Dread(cols, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, iall));
    bad = 0;
    for (long r = 0; r < (long)dims[0]; r++)
        for (long c = 0; c < (long)dims[1]; c++)
            bad += iall[r * dims[1] + c] != (int)(r * 10000 + c);
    if (bad)
        fprintf(stderr, "rank %d: cols: %ld wrong values\n", rank, bad), errs++;
    H5Dclose(cols);

    chunked = H5Dopen2(file, "chunked", H5P_DEFAULT);
    CHECK_H5(H5Dread(chunked, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, all));
    bad = 0;
    for (int p = 0; p < size; p++)
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++)
                bad += all[(p * 16 + i) * dims[1] + p * 16 + j] != val(3, p, i * 16 + j);
    if (bad)
        fprintf(stderr, "rank %d: chunked: %ld wrong values\n", rank, bad), errs++;
    H5Dclose(chunked);
    CHECK_H5(H5Fclose(file));
    H5Pclose(fapl);

    int total = 0;
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        char v[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(v, &len);
        printf("%s phdf5 (%d ranks, %.40s)\n", total ? "FAIL" : "PASS", size, v);
        if (total == 0)
            remove(name);
    }
    free(buf);
    free(ibuf);
    free(all);
    free(iall);
    MPI_Finalize();
    return total != 0;
}
