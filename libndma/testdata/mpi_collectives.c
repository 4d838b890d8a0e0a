/*
 * mpi_collectives: an ordinary MPI program that checks MPI's collectives
 * against the MPI library's own (the PMPI_ functions), for the NDMA
 * interposition library (libndma/mpi). Run with and without it: without,
 * MPI_ and PMPI_ are one implementation and every check holds trivially;
 * with it, the MPI_ calls it takes run through NDMA.
 *
 * For every intercepted call x data type x op x root x in-place x count
 * (0, odd, one and many datagrams) x communicator (MPI_COMM_WORLD, a split
 * one with ranks reordered, a dup): integer results and exactly
 * representable float results are bitwise equal to PMPI's; float sums of
 * random values are within (n-1) * eps * sum|x| of PMPI's and, with
 * "deterministic", bitwise equal to the sum in rank order. Then the
 * calls that must fall back (derived types, a user op, MPI_BAND) and a
 * barrier's ordering.
 *
 * Usage: mpi_collectives [ndma] [deterministic] [quick]
 *   ndma: require that the interposition library is loaded and that each
 *   operation went through NDMA at least once (and fell back where it
 *   must); quick: the largest count and the dup left out (for MPIs that
 *   spin when ranks share few cores). Prints "ok rank N" on every rank
 *   when all checks pass.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int wrank, wsize, failures;
static int deterministic, want_ndma, quick;

/* MPICH before 4.1.2 crashes in MPI_Reduce with MPI_IN_PLACE at a
 * non-zero root (pmodels/mpich#6540): with such an MPICH that call is
 * made only where NDMA takes it (not for count 0, nor unsigned MIN and
 * MAX, which go to MPI). */
#if defined(MPICH_NUMVERSION) && MPICH_NUMVERSION < 40102000
#define REDUCE_IN_PLACE_NONZERO_ROOT_BROKEN 1
#else
#define REDUCE_IN_PLACE_NONZERO_ROOT_BROKEN 0
#endif

#define CHECK(cond, ...)                                                                                           \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            if (failures++ < 20) {                                                                                 \
                fprintf(stderr, "rank %d: %s:%d: ", wrank, __FILE__, __LINE__);                                    \
                fprintf(stderr, __VA_ARGS__);                                                                      \
                fprintf(stderr, "\n");                                                                             \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

struct dtype {
    MPI_Datatype t;
    const char *name;
    int size;
    int isfloat; /* 1 float, 2 double */
    int isunsigned;
};

static struct dtype dtypes[] = {
    {MPI_FLOAT, "MPI_FLOAT", 4, 1, 0},          {MPI_DOUBLE, "MPI_DOUBLE", 8, 2, 0},
    {MPI_INT, "MPI_INT", 4, 0, 0},              {MPI_LONG, "MPI_LONG", sizeof(long), 0, 0},
    {MPI_LONG_LONG, "MPI_LONG_LONG", 8, 0, 0},  {MPI_INT64_T, "MPI_INT64_T", 8, 0, 0},
    {MPI_UNSIGNED, "MPI_UNSIGNED", 4, 0, 1},    {MPI_UINT64_T, "MPI_UINT64_T", 8, 0, 1},
};
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

static MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
static const char *opnames[] = {"SUM", "PROD", "MIN", "MAX"};
#define NOPS 4

static int counts[] = {0, 1, 7, 1000, 40001};
static int ncounts = (int)(sizeof counts / sizeof counts[0]); /* "quick": the last one left out */

/* fill writes count elements of d for rank r: small integers (so that
 * sums and products of 4 ranks are exact in every type and order). */
static void fill(void *buf, const struct dtype *d, int count, int r, int salt) {
    for (int i = 0; i < count; i++) {
        long v = (long)((i * 7 + r * 13 + salt) % 7) - 3; /* -3..3 */
        if (d->isunsigned)
            v = (i + r + salt) % 5 + 1; /* 1..5 */
        switch (d->size * 10 + d->isfloat) {
        case 41:
            ((float *)buf)[i] = (float)v;
            break;
        case 82:
            ((double *)buf)[i] = (double)v;
            break;
        case 40:
            ((int32_t *)buf)[i] = (int32_t)v;
            break;
        case 80:
            ((int64_t *)buf)[i] = (int64_t)v;
            break;
        }
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    return p;
}

/* reductions checks Allreduce, Reduce and Reduce_scatter_block on comm
 * with integer-valued data against PMPI: bitwise equal. */
static void reductions(MPI_Comm comm, const char *cname) {
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    for (int di = 0; di < NDTYPES; di++) {
        const struct dtype *d = &dtypes[di];
        for (int oi = 0; oi < NOPS; oi++) {
            for (int ci = 0; ci < ncounts; ci++) {
                int count = counts[ci];
                size_t bytes = (size_t)count * d->size;
                char *in = xmalloc(bytes * n), *out = xmalloc(bytes * n), *ref = xmalloc(bytes * n);
                fill(in, d, count * n, rank, oi + ci);

                /* Allreduce, then in place. */
                memset(out, 0x5a, bytes);
                MPI_Allreduce(in, out, count, d->t, ops[oi], comm);
                PMPI_Allreduce(in, ref, count, d->t, ops[oi], comm);
                CHECK(!memcmp(out, ref, bytes), "%s: MPI_Allreduce %s %s count %d differs from PMPI's", cname, d->name,
                      opnames[oi], count);
                memcpy(out, in, bytes);
                MPI_Allreduce(MPI_IN_PLACE, out, count, d->t, ops[oi], comm);
                CHECK(!memcmp(out, ref, bytes), "%s: MPI_Allreduce in place %s %s count %d differs", cname, d->name,
                      opnames[oi], count);

                /* Reduce to the first and the last rank, then in place at
                 * the root. */
                for (int root = 0; root < n; root += n - 1) {
                    memset(out, 0x5a, bytes);
                    MPI_Reduce(in, rank == root ? out : NULL, count, d->t, ops[oi], root, comm);
                    if (rank == root)
                        CHECK(!memcmp(out, ref, bytes), "%s: MPI_Reduce %s %s count %d root %d differs", cname,
                              d->name, opnames[oi], count, root);
                    if (root != 0 && REDUCE_IN_PLACE_NONZERO_ROOT_BROKEN && 
                        (!want_ndma || count == 0 || (d->isunsigned && ops[oi] != MPI_SUM && ops[oi] != MPI_PROD)))
                        continue;
                    memcpy(out, in, bytes);
                    MPI_Reduce(rank == root ? MPI_IN_PLACE : in, rank == root ? out : NULL, count, d->t, ops[oi],
                               root, comm);
                    if (rank == root)
                        CHECK(!memcmp(out, ref, bytes), "%s: MPI_Reduce in place %s %s count %d root %d differs",
                              cname, d->name, opnames[oi], count, root);
                    if (n == 1)
                        break;
                }

                /* Reduce_scatter_block: n blocks of count in. */
                memset(out, 0x5a, bytes);
                MPI_Reduce_scatter_block(in, out, count, d->t, ops[oi], comm);
                PMPI_Reduce_scatter_block(in, ref, count, d->t, ops[oi], comm);
                CHECK(!memcmp(out, ref, bytes), "%s: MPI_Reduce_scatter_block %s %s count %d differs", cname, d->name,
                      opnames[oi], count);
                memcpy(out, in, bytes * n);
                MPI_Reduce_scatter_block(MPI_IN_PLACE, out, count, d->t, ops[oi], comm);
                CHECK(!memcmp(out, ref, bytes), "%s: MPI_Reduce_scatter_block in place %s %s count %d differs", cname,
                      d->name, opnames[oi], count);
                /* Reduce_scatter with equal counts (the block form). */
                int *rcounts = xmalloc(sizeof(int) * n);
                for (int r = 0; r < n; r++)
                    rcounts[r] = count;
                memset(out, 0x5a, bytes);
                MPI_Reduce_scatter(in, out, rcounts, d->t, ops[oi], comm);
                CHECK(!memcmp(out, ref, bytes), "%s: MPI_Reduce_scatter %s %s count %d differs", cname, d->name,
                      opnames[oi], count);
                free(rcounts);
                free(in);
                free(out);
                free(ref);
            }
        }
    }
}

/* rounding checks float and double sums of random values: within
 * (n-1) * eps * sum|x| of PMPI's, and with deterministic, bitwise equal to
 * the sum in rank order. */
static void rounding(MPI_Comm comm, const char *cname) {
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    const int count = 4099;
    float *f = xmalloc(sizeof(float) * count), *fo = xmalloc(sizeof(float) * count);
    float *fr = xmalloc(sizeof(float) * count), *fall = xmalloc(sizeof(float) * count * n);
    double *x = xmalloc(sizeof(double) * count), *xo = xmalloc(sizeof(double) * count);
    double *xr = xmalloc(sizeof(double) * count), *xall = xmalloc(sizeof(double) * count * n);
    srand(1000 + rank);
    for (int i = 0; i < count; i++) {
        f[i] = (float)rand() / RAND_MAX * 2 - 1;
        x[i] = (double)rand() / RAND_MAX * 2e6 - 1e6;
    }
    MPI_Allreduce(f, fo, count, MPI_FLOAT, MPI_SUM, comm);
    PMPI_Allreduce(f, fr, count, MPI_FLOAT, MPI_SUM, comm);
    MPI_Allreduce(x, xo, count, MPI_DOUBLE, MPI_SUM, comm);
    PMPI_Allreduce(x, xr, count, MPI_DOUBLE, MPI_SUM, comm);
    PMPI_Allgather(f, count, MPI_FLOAT, fall, count, MPI_FLOAT, comm);
    PMPI_Allgather(x, count, MPI_DOUBLE, xall, count, MPI_DOUBLE, comm);
    int fbad = 0, xbad = 0, fdet = 0, xdet = 0;
    for (int i = 0; i < count; i++) {
        double fabs_sum = 0, xabs_sum = 0;
        float fseq = fall[i];
        double xseq = xall[i];
        for (int r = 0; r < n; r++) {
            fabs_sum += fabsf(fall[r * count + i]);
            xabs_sum += fabs(xall[r * count + i]);
            if (r > 0) {
                fseq += fall[r * count + i];
                xseq += xall[r * count + i];
            }
        }
        if (fabs((double)fo[i] - fr[i]) > (n - 1) * FLT_EPSILON * fabs_sum)
            fbad++;
        if (fabs(xo[i] - xr[i]) > (n - 1) * DBL_EPSILON * xabs_sum)
            xbad++;
        if (memcmp(&fo[i], &fseq, sizeof fseq))
            fdet++;
        if (memcmp(&xo[i], &xseq, sizeof xseq))
            xdet++;
    }
    CHECK(fbad == 0 && xbad == 0, "%s: random sums beyond the rounding bound: %d floats, %d doubles", cname, fbad,
          xbad);
    if (deterministic)
        CHECK(fdet == 0 && xdet == 0, "%s: deterministic sums differ from rank order: %d floats, %d doubles", cname,
              fdet, xdet);
    free(f);
    free(fo);
    free(fr);
    free(fall);
    free(x);
    free(xo);
    free(xr);
    free(xall);
}

static unsigned char pattern(int root, int salt, size_t i) { return (unsigned char)(root * 31 + salt * 7 + i * 13); }

/* movers checks Bcast (every root) and Allgather (in place and not, the
 * send and receive types differing). */
/* blocks checks MPI_Gather and MPI_Scatter (every root, in place at the
 * root too) and MPI_Alltoall (in place too) of count elements of t
 * (bytes bytes) per block against PMPI's; buf and ref hold n blocks. */
static void blocks(MPI_Comm comm, const char *cname, MPI_Datatype t, const char *tname, int count, int bytes,
                   unsigned char *buf, unsigned char *ref) {
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    unsigned char *send = xmalloc((size_t)bytes * n), *mine = xmalloc(bytes), *got = xmalloc(bytes);
    for (int root = 0; root < n; root++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            int ip = inplace && rank == root;
            for (int i = 0; i < bytes; i++)
                mine[i] = pattern(rank, root + inplace, i);
            memset(buf, 0xee, (size_t)bytes * n);
            if (ip)
                memcpy(buf + (size_t)rank * bytes, mine, bytes);
            MPI_Gather(ip ? MPI_IN_PLACE : mine, count, t, buf, count, t, root, comm);
            PMPI_Gather(mine, bytes, MPI_BYTE, ref, bytes, MPI_BYTE, root, comm);
            CHECK(rank != root || !memcmp(buf, ref, (size_t)bytes * n), "%s: MPI_Gather%s %s count %d root %d differs from PMPI's",
                  cname, inplace ? " in place" : "", tname, count, root);
            for (int i = 0; i < bytes * n; i++)
                send[i] = pattern(root, i / (bytes ? bytes : 1) + inplace, i);
            memset(got, 0xee, bytes);
            MPI_Scatter(send, count, t, ip ? MPI_IN_PLACE : got, count, t, root, comm);
            PMPI_Scatter(send, bytes, MPI_BYTE, mine, bytes, MPI_BYTE, root, comm);
            CHECK(ip || !memcmp(got, mine, bytes), "%s: MPI_Scatter%s %s count %d root %d differs from PMPI's", cname,
                  inplace ? " in place" : "", tname, count, root);
        }
    }
    for (int inplace = 0; inplace < 2; inplace++) {
        for (int i = 0; i < bytes * n; i++)
            send[i] = pattern(rank, i / (bytes ? bytes : 1) + inplace, i);
        PMPI_Alltoall(send, bytes, MPI_BYTE, ref, bytes, MPI_BYTE, comm);
        if (inplace) {
            memcpy(buf, send, (size_t)bytes * n);
            MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, count, t, comm);
        } else {
            memset(buf, 0xee, (size_t)bytes * n);
            MPI_Alltoall(send, count, t, buf, count, t, comm);
        }
        CHECK(!memcmp(buf, ref, (size_t)bytes * n), "%s: MPI_Alltoall%s %s count %d differs from PMPI's", cname,
              inplace ? " in place" : "", tname, count);
    }
    free(send);
    free(mine);
    free(got);
}

static void movers(MPI_Comm comm, const char *cname) {
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    static const struct {
        MPI_Datatype t;
        int size;
        const char *name;
    } types[] = {{MPI_BYTE, 1, "MPI_BYTE"}, {MPI_CHAR, 1, "MPI_CHAR"}, {MPI_INT, 4, "MPI_INT"}, {MPI_DOUBLE, 8, "MPI_DOUBLE"}};
    for (int ti = 0; ti < 4; ti++) {
        for (int ci = 0; ci < ncounts; ci++) {
            int count = counts[ci];
            size_t bytes = (size_t)count * types[ti].size;
            unsigned char *buf = xmalloc(bytes * n), *ref = xmalloc(bytes * n);
            for (int root = 0; root < n; root++) {
                for (size_t i = 0; i < bytes; i++)
                    buf[i] = rank == root ? pattern(root, ci, i) : 0xee;
                MPI_Bcast(buf, count, types[ti].t, root, comm);
                size_t bad = 0;
                for (size_t i = 0; i < bytes; i++)
                    bad += buf[i] != pattern(root, ci, i);
                CHECK(bad == 0, "%s: MPI_Bcast %s count %d root %d: %zu bytes differ", cname, types[ti].name, count,
                      root, bad);
            }
            for (int inplace = 0; inplace < 2; inplace++) {
                unsigned char *mine = xmalloc(bytes);
                for (size_t i = 0; i < bytes; i++)
                    mine[i] = pattern(rank, ci + inplace, i);
                memset(buf, 0xee, bytes * n);
                if (inplace) {
                    memcpy(buf + rank * bytes, mine, bytes);
                    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, count, types[ti].t, comm);
                } else {
                    /* sent as bytes, received as the type */
                    MPI_Allgather(mine, (int)bytes, MPI_BYTE, buf, count, types[ti].t, comm);
                }
                PMPI_Allgather(mine, (int)bytes, MPI_BYTE, ref, (int)bytes, MPI_BYTE, comm);
                CHECK(!memcmp(buf, ref, bytes * n), "%s: MPI_Allgather%s %s count %d differs from PMPI's", cname,
                      inplace ? " in place" : "", types[ti].name, count);
                free(mine);
            }
            blocks(comm, cname, types[ti].t, types[ti].name, count, (int)bytes, buf, ref);
            free(buf);
            free(ref);
        }
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* barrier checks that no rank leaves MPI_Barrier before the last one
 * enters it (the ranks share this machine's clock). */
static void barrier(MPI_Comm comm, const char *cname) {
    int rank;
    MPI_Comm_rank(comm, &rank);
    for (int round = 0; round < 3; round++) {
        usleep((useconds_t)(rank * 20000 * (round + 1) % 70000));
        double in = now();
        MPI_Barrier(comm);
        double out = now(), last_in, first_out;
        PMPI_Allreduce(&in, &last_in, 1, MPI_DOUBLE, MPI_MAX, comm);
        PMPI_Allreduce(&out, &first_out, 1, MPI_DOUBLE, MPI_MIN, comm);
        CHECK(first_out >= last_in, "%s: a rank left MPI_Barrier %.6f s before the last entered it", cname,
              last_in - first_out);
    }
}

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

/* fallbacks runs Bcasts of derived types (with gaps: packed; without
 * them: as they are) and of one datatype at the root and another
 * elsewhere, which NDMA takes, and what NDMA must decline: a user op,
 * MPI_BAND, unequal Reduce_scatter counts; results correct either way. */
static void fallbacks(MPI_Comm comm) {
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    MPI_Datatype vec, pair;
    MPI_Type_vector(10, 1, 2, MPI_INT, &vec); /* every other int of 20 */
    MPI_Type_commit(&vec);
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    int buf[20];
    for (int i = 0; i < 20; i++)
        buf[i] = rank == 1 ? 100 + i : -1;
    MPI_Bcast(buf, 1, vec, 1, comm);
    for (int i = 0; i < 20; i++)
        CHECK(buf[i] == (i % 2 == 0 || rank == 1 ? 100 + i : -1), "derived-type MPI_Bcast: buf[%d] = %d", i, buf[i]);
    for (int i = 0; i < 20; i++)
        buf[i] = rank == 0 ? 7 * i : 0;
    MPI_Bcast(buf, 10, pair, 0, comm);
    for (int i = 0; i < 20; i++)
        CHECK(buf[i] == 7 * i, "contiguous derived-type MPI_Bcast: buf[%d] = %d", i, buf[i]);
    /* One datatype at the root, another elsewhere (the same ints): ten
     * MPI_INT at rank 0, ten every other int (the vector type) at the
     * others; then twenty MPI_INT at rank 2 % n, ten pairs elsewhere. */
    for (int i = 0; i < 20; i++)
        buf[i] = rank == 0 ? (i < 10 ? 3 * i + 1 : -2) : -1;
    if (rank == 0)
        MPI_Bcast(buf, 10, MPI_INT, 0, comm);
    else
        MPI_Bcast(buf, 1, vec, 0, comm);
    for (int i = 0; i < 20; i++) {
        int want = rank == 0 ? (i < 10 ? 3 * i + 1 : -2) : (i % 2 == 0 ? 3 * (i / 2) + 1 : -1);
        CHECK(buf[i] == want, "mixed-datatype MPI_Bcast (int, vector): buf[%d] = %d, want %d", i, buf[i], want);
    }
    int root2 = 2 % n;
    for (int i = 0; i < 20; i++)
        buf[i] = rank == root2 ? 11 * i : 0;
    if (rank == root2)
        MPI_Bcast(buf, 20, MPI_INT, root2, comm);
    else
        MPI_Bcast(buf, 10, pair, root2, comm);
    for (int i = 0; i < 20; i++)
        CHECK(buf[i] == 11 * i, "mixed-datatype MPI_Bcast (int, pair): buf[%d] = %d", i, buf[i]);

    MPI_Op op;
    MPI_Op_create(user_sum, 1, &op);
    int in[33], out[33];
    for (int i = 0; i < 33; i++)
        in[i] = rank * 1000 + i;
    MPI_Allreduce(in, out, 33, MPI_INT, op, comm);
    for (int i = 0; i < 33; i++)
        CHECK(out[i] == 1000 * n * (n - 1) / 2 + n * i, "user-op MPI_Allreduce: out[%d] = %d", i, out[i]);
    MPI_Op_free(&op);
    for (int i = 0; i < 33; i++)
        in[i] = 0xff0 | (1 << (rank % 4));
    MPI_Allreduce(in, out, 33, MPI_INT, MPI_BAND, comm);
    CHECK(out[0] == (n == 1 ? in[0] : 0xff0), "MPI_BAND MPI_Allreduce: %#x", out[0]);
    /* Reduce_scatter with unequal counts: rank r gets r+1 elements. */
    int total = n * (n + 1) / 2, *rc = xmalloc(sizeof(int) * n);
    long *lin = xmalloc(sizeof(long) * total), *lout = xmalloc(sizeof(long) * (rank + 1));
    for (int r = 0; r < n; r++)
        rc[r] = r + 1;
    for (int i = 0; i < total; i++)
        lin[i] = rank + i;
    MPI_Reduce_scatter(lin, lout, rc, MPI_LONG, MPI_SUM, comm);
    int first = rank * (rank + 1) / 2;
    for (int i = 0; i <= rank; i++)
        CHECK(lout[i] == (long)n * (n - 1) / 2 + (long)n * (first + i), "unequal MPI_Reduce_scatter: [%d] = %ld", i,
              lout[i]);
    free(rc);
    free(lin);
    free(lout);
    MPI_Type_free(&vec);
    MPI_Type_free(&pair);
}

/* The operations ndma_mpi_counts reports, in its order. */
#define NCOUNTED 9
typedef void (*counts_fn)(unsigned long long ndma[NCOUNTED], unsigned long long mpi[NCOUNTED]);

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "ndma"))
            want_ndma = 1;
        else if (!strcmp(argv[i], "deterministic"))
            deterministic = 1;
        else if (!strcmp(argv[i], "quick"))
            quick = 1;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    counts_fn counts_of = (counts_fn)dlsym(RTLD_DEFAULT, "ndma_mpi_counts");
    if (want_ndma && counts_of == NULL) {
        fprintf(stderr, "rank %d: the NDMA interposition library is not loaded\n", wrank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    /* A communicator of the odd and one of the even ranks, each in
     * reverse order; and a dup of the world. */
    MPI_Comm split, dup;
    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, -wrank, &split);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    struct {
        MPI_Comm c;
        const char *name;
    } comms[] = {{MPI_COMM_WORLD, "MPI_COMM_WORLD"}, {split, "split"}, {dup, "dup"}};
    if (quick)
        ncounts--;
    for (int i = 0; i < (quick ? 2 : 3); i++) {
        reductions(comms[i].c, comms[i].name);
        rounding(comms[i].c, comms[i].name);
        movers(comms[i].c, comms[i].name);
        barrier(comms[i].c, comms[i].name);
    }
    /* Communicators made and freed: each is its own group while it
     * lives. */
    for (int i = 0; i < 10; i++) {
        MPI_Comm c;
        MPI_Comm_split(MPI_COMM_WORLD, wrank < wsize / 2, wrank, &c);
        long v = wrank + i, sum = 0;
        MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, c);
        int n, r;
        MPI_Comm_size(c, &n);
        MPI_Comm_rank(c, &r);
        long first = wrank - r; /* the group's lowest world rank */
        CHECK(sum == n * (first + i) + (long)n * (n - 1) / 2, "made-and-freed communicator %d: sum %ld", i, sum);
        MPI_Comm_free(&c);
    }
    /* MPI_Comm_create: the even ranks. */
    {
        MPI_Group world, evens;
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        int ranks[64], n = 0;
        for (int r = 0; r < wsize && n < 64; r += 2)
            ranks[n++] = r;
        MPI_Group_incl(world, n, ranks, &evens);
        MPI_Comm c;
        MPI_Comm_create(MPI_COMM_WORLD, evens, &c);
        if (c != MPI_COMM_NULL) {
            double v[3] = {wrank, 1, -wrank}, sum[3];
            MPI_Allreduce(v, sum, 3, MPI_DOUBLE, MPI_SUM, c);
            double want = (double)(n - 1) * n; /* 0 + 2 + ... + 2(n-1) */
            CHECK(sum[0] == want && sum[1] == n && sum[2] == -want, "MPI_Comm_create communicator: %g %g %g", sum[0],
                  sum[1], sum[2]);
            MPI_Comm_free(&c);
        }
        MPI_Group_free(&evens);
        MPI_Group_free(&world);
    }
    unsigned long long nd0[NCOUNTED] = {0}, mp0[NCOUNTED] = {0}, nd[NCOUNTED] = {0}, mp[NCOUNTED] = {0};
    if (counts_of)
        counts_of(nd0, mp0);
    fallbacks(MPI_COMM_WORLD);
    if (counts_of)
        counts_of(nd, mp);
    if (want_ndma) {
        static const char *names[NCOUNTED] = {"Bcast",   "Allreduce", "Reduce",  "Allgather", "Reduce_scatter_block",
                                          "Barrier", "Gather",    "Scatter", "Alltoall"};
        for (int i = 0; i < NCOUNTED; i++)
            CHECK(nd0[i] > 0, "no MPI_%s went through NDMA (%llu to MPI)", names[i], mp0[i]);
        CHECK(mp[0] == mp0[0] && nd[0] - nd0[0] == 4, "derived- and mixed-type MPI_Bcasts: %llu of 4 to NDMA, %llu to MPI",
              nd[0] - nd0[0], mp[0] - mp0[0]);
        CHECK(mp[1] - mp0[1] == 2 && nd[1] == nd0[1], "user-op and MPI_BAND MPI_Allreduces: %llu of 2 to MPI",
              mp[1] - mp0[1]);
        CHECK(mp[4] - mp0[4] == 1 && nd[4] == nd0[4], "unequal MPI_Reduce_scatter: %llu of 1 to MPI", mp[4] - mp0[4]);
    }
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);
    int all = 0;
    PMPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (failures == 0 && all == 0)
        printf("ok rank %d\n", wrank);
    else if (failures == 0)
        printf("another rank failed\n");
    MPI_Finalize();
    return failures ? 1 : 0;
}
