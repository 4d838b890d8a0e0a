/*
 * ndma_mpi.c: libndma_mpi, MPI's collectives through NDMA for unmodified
 * MPI programs (the PMPI profiling interface, as SHARP and HCOLL do it).
 *
 * Loaded before the MPI library (mpirun -x LD_PRELOAD=.../libndma_mpi.so,
 * or linked before -lmpi), it defines MPI_Init, MPI_Init_thread,
 * MPI_Finalize and the blocking MPI_Bcast, MPI_Allreduce, MPI_Reduce,
 * MPI_Allgather, MPI_Reduce_scatter_block, MPI_Reduce_scatter (when every
 * rank's count is the same: the block form), MPI_Barrier, MPI_Gather,
 * MPI_Scatter and MPI_Alltoall. A call goes
 * through NDMA (libndma: one multicast or one aggregation through the
 * switch) when NDMA can give exactly what MPI promises; otherwise it calls
 * the MPI library's own PMPI_ function. What decides is only what every
 * rank of the communicator passes alike (count, datatype, op, root, the
 * communicator, MPI_IN_PLACE where MPI requires it on all ranks), so the
 * ranks of a call never split between the two paths:
 *
 *   - datatypes: predefined (MPI_COMBINER_NAMED) without gaps (size ==
 *     extent, lower bound 0); reductions also need a type NDMA reduces:
 *     float, double, 32- and 64-bit signed integers (C's or Fortran's),
 *     and unsigned ones for MPI_SUM and MPI_PROD (which wrap alike);
 *   - ops: MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX;
 *   - intracommunicators of 2 or more ranks; a communicator is joined at
 *     the switch as its own group the first time a call on it goes
 *     through NDMA (MPI_COMM_WORLD at MPI_Init), the group cached on the
 *     communicator (an attribute) and left when it is freed;
 *   - at least NDMA_MPI_MIN_BYTES bytes per rank (default 0), the
 *     operation not disabled by NDMA_MPI_<OP>=0;
 *   - count 0 goes to MPI (nothing to move).
 *
 * MPI_IN_PLACE works for Allreduce, Reduce (at the root), Allgather,
 * Reduce_scatter_block, Gather and Scatter (at the root) and Alltoall.
 * Gather, Scatter and Alltoall decide on the blocks' bytes and on each
 * rank's significant datatypes being predefined without gaps: give every
 * rank such types (as MPI programs do), or a rank taking MPI's path
 * while the others take NDMA's waits for them. Non-blocking collectives (MPI_Ibcast...) and all
 * others go to MPI. Fortran: MPICH's Fortran bindings call the MPI_
 * functions, so a Fortran program under MPICH goes through NDMA as a C
 * one does (MPI_REAL, MPI_DOUBLE_PRECISION, MPI_INTEGER... are
 * reduced); Open MPI's call the PMPI_ ones, MPI_Init included, so under
 * Open MPI a Fortran program runs on MPI's own collectives (nothing
 * breaks, nothing is faster).
 *
 * Environment (world rank 0's values hold for every rank):
 *   NDMA_SWITCH (or NDMA_SWITCHES), NDMA_TOKEN or NDMA_INSECURE=1, NDMA_CREDENTIAL,
 *   NDMA_TIMEOUT, NDMA_DETERMINISTIC...: as for ndma_comm_from_env.
 *   NDMA_HIERARCHY=off  every rank over the network; by default (auto)
 *                     the ranks of a host run the collectives through
 *                     shared memory, one leader per host over the network
 *                     (see ndma_config.hierarchy), on every communicator
 *                     the library joins. It must be the same on every
 *                     rank (mpirun -x NDMA_HIERARCHY=off, or -genv).
 *                     NDMA_HOST_ID as for ndma_comm_from_env.
 *   NDMA_JOB          the job's group name prefix (default: a random one
 *                     rank 0 picks and broadcasts). With NDMA_CREDENTIAL
 *                     it must be the job (or scope) the credential names:
 *                     a sealed switch lets a credential join those only.
 *   NDMA_MPI=0        everything to MPI, silently.
 *   NDMA_MPI_STRICT=1 abort the job instead of falling back to MPI when
 *                     NDMA cannot be set up.
 *   NDMA_MPI_MIN_BYTES=N  only calls of N or more bytes per rank.
 *   NDMA_MPI_BCAST, _ALLREDUCE, _REDUCE, _ALLGATHER, _REDUCE_SCATTER,
 *   _BARRIER, _GATHER, _SCATTER, _ALLTOALL =0: that operation to MPI.
 *   NDMA_MPI_VERBOSE=1  rank 0 prints what was set up, and every rank its
 *                     count of calls through each path at MPI_Finalize.
 *
 * When NDMA cannot be set up (no NDMA_SWITCH, no switch answering, a join
 * refused), one warning is printed and every collective runs on MPI's own.
 * A collective that fails once it runs through NDMA (a rank died, the
 * time limit passed) is reported to the communicator's error handler as
 * MPI_ERR_OTHER, with libndma's message on stderr.
 *
 * ndma_mpi_counts reports, per operation (the NDMA_MPI_OP_* order), how
 * many calls went through NDMA and how many to MPI; tests find it with
 * dlsym.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <ndma.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
    OP_BCAST,
    OP_ALLREDUCE,
    OP_REDUCE,
    OP_ALLGATHER,
    OP_REDUCE_SCATTER,
    OP_BARRIER,
    OP_GATHER,
    OP_SCATTER,
    OP_ALLTOALL,
    NOPS
};

static const char *const op_env[NOPS] = {
    "NDMA_MPI_BCAST",   "NDMA_MPI_ALLREDUCE", "NDMA_MPI_REDUCE",  "NDMA_MPI_ALLGATHER", "NDMA_MPI_REDUCE_SCATTER",
    "NDMA_MPI_BARRIER", "NDMA_MPI_GATHER",    "NDMA_MPI_SCATTER", "NDMA_MPI_ALLTOALL",
};
static const char *const op_name[NOPS] = {
    "MPI_Bcast",   "MPI_Allreduce", "MPI_Reduce",  "MPI_Allgather", "MPI_Reduce_scatter_block",
    "MPI_Barrier", "MPI_Gather",    "MPI_Scatter", "MPI_Alltoall",
};

/* The longest group name: the switch's bound. */
#define NAME_MAX_LEN 64
/* The longest job prefix taken from NDMA_JOB: room for ".RANK.COUNTER". */
#define JOB_MAX_LEN 40

/* settings are what world rank 0 decides at MPI_Init and broadcasts, so
 * that every rank decides alike. */
struct settings {
    int active;              /* NDMA is set up; 0: every call to MPI */
    int strict;
    int verbose;
    int on[NOPS];            /* per operation (0 when !active) */
    long long min_bytes;
    char job[JOB_MAX_LEN + 1];
};

static struct settings g;
static int keyval = MPI_KEYVAL_INVALID;
static int world_rank;
static int finalized;

/* A communicator's NDMA group, the value of its keyval attribute. */
struct group {
    ndma_comm_t h;           /* 0: declined (calls on the communicator go to MPI) */
    struct group *next, *prev;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* groups, counter */
static struct group groups = {0, &groups, &groups};    /* every live group */
static unsigned counter;                               /* sub-communicators named */

static unsigned long long n_ndma[NOPS], n_mpi[NOPS];

void ndma_mpi_counts(unsigned long long ndma[NOPS], unsigned long long mpi[NOPS]) {
    for (int i = 0; i < NOPS; i++) {
        if (ndma)
            ndma[i] = __atomic_load_n(&n_ndma[i], __ATOMIC_RELAXED);
        if (mpi)
            mpi[i] = __atomic_load_n(&n_mpi[i], __ATOMIC_RELAXED);
    }
}

static void tally(unsigned long long *c) { __atomic_fetch_add(c, 1, __ATOMIC_RELAXED); }

static long long env_int(const char *name, long long def) {
    const char *v = getenv(name);
    if (v == NULL || *v == 0)
        return def;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno != 0 || *end != 0 || n < 0) {
        fprintf(stderr, "ndma_mpi: %s=\"%s\": want a non-negative integer; using %lld\n", name, v, def);
        return def;
    }
    return n;
}

static int group_delete(MPI_Comm comm, int kv, void *val, void *extra) {
    (void)comm;
    (void)kv;
    (void)extra;
    struct group *gr = val;
    pthread_mutex_lock(&mu);
    gr->prev->next = gr->next;
    gr->next->prev = gr->prev;
    pthread_mutex_unlock(&mu);
    if (gr->h != 0 && ndma_comm_free(gr->h) != NDMA_OK)
        fprintf(stderr, "ndma_mpi: leaving a communicator's group: %s\n", ndma_last_error());
    free(gr);
    return MPI_SUCCESS;
}

/* join makes comm's NDMA group (collective over comm): rank 0 names it,
 * every rank joins, and all agree whether every rank did. Returns the
 * group, h 0 when declined, attached to comm. */
static struct group *join(MPI_Comm comm) {
    struct group *gr = calloc(1, sizeof *gr);
    if (gr == NULL) {
        fprintf(stderr, "ndma_mpi: out of memory\n");
        PMPI_Abort(comm, 1);
        return NULL;
    }
    int inter = 0, size = 1, rank = 0;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
    if (!inter && size > 1) {
        char name[NAME_MAX_LEN + 1] = {0};
        if (rank == 0) {
            if (comm == MPI_COMM_WORLD) {
                snprintf(name, sizeof name, "%s", g.job);
            } else {
                pthread_mutex_lock(&mu);
                unsigned n = ++counter;
                pthread_mutex_unlock(&mu);
                snprintf(name, sizeof name, "%s.%d.%u", g.job, world_rank, n);
            }
        }
        PMPI_Bcast(name, sizeof name, MPI_CHAR, 0, comm);
        ndma_comm_t h = 0;
        int rc = ndma_comm_from_env_as(name, rank, size, &h);
        /* The lowest rank that failed, or size: that rank says why. */
        int failed = rc == NDMA_OK ? size : rank, first = size;
        PMPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, comm);
        if (first == size) {
            gr->h = h;
        } else {
            if (rc == NDMA_OK) {
                ndma_comm_free(h);
            } else if (rank == first) {
                fprintf(stderr, "ndma_mpi: rank %d of a %d-rank communicator: NDMA declined (%s: %s); %s\n", rank,
                        size, ndma_strerror(rc), ndma_last_error(),
                        g.strict ? "aborting (NDMA_MPI_STRICT=1)" : "its collectives run on MPI's own");
            }
            if (g.strict)
                PMPI_Abort(comm, 1);
        }
    }
    pthread_mutex_lock(&mu);
    gr->next = groups.next;
    gr->prev = &groups;
    groups.next->prev = gr;
    groups.next = gr;
    pthread_mutex_unlock(&mu);
    PMPI_Comm_set_attr(comm, keyval, gr);
    return gr;
}

/* group_of returns comm's NDMA handle, joining first if comm has none
 * yet (collective: only called where every rank of comm calls it), or 0
 * if calls on comm go to MPI. */
static ndma_comm_t group_of(MPI_Comm comm) {
    void *v = NULL;
    int flag = 0;
    if (PMPI_Comm_get_attr(comm, keyval, &v, &flag) != MPI_SUCCESS)
        return 0;
    struct group *gr = flag ? v : join(comm);
    return gr == NULL ? 0 : gr->h;
}

/* contiguous reports whether dt is a predefined type without gaps, and
 * its size. */
static int contiguous(MPI_Datatype dt, int *size) {
    int ni, na, nd, combiner;
    if (PMPI_Type_get_envelope(dt, &ni, &na, &nd, &combiner) != MPI_SUCCESS || combiner != MPI_COMBINER_NAMED)
        return 0;
    MPI_Aint lb, extent;
    if (PMPI_Type_size(dt, size) != MPI_SUCCESS || PMPI_Type_get_extent(dt, &lb, &extent) != MPI_SUCCESS)
        return 0;
    return lb == 0 && extent == *size && *size > 0;
}

/* reducible maps (dt, op) to NDMA's, with the element size. */
static int reducible(MPI_Datatype dt, MPI_Op op, ndma_dtype *t, ndma_op *o, int *esize) {
    if (op == MPI_SUM)
        *o = NDMA_SUM;
    else if (op == MPI_PROD)
        *o = NDMA_PROD;
    else if (op == MPI_MIN)
        *o = NDMA_MIN;
    else if (op == MPI_MAX)
        *o = NDMA_MAX;
    else
        return 0;
    int wraps = op == MPI_SUM || op == MPI_PROD; /* unsigned and signed agree */
    int sz = 0;
    if (!contiguous(dt, &sz))
        return 0;
    *esize = sz;
    /* C types, and the Fortran ones (MPICH's Fortran bindings call these
     * functions): the size, not the name, says 32 or 64 bits. */
    int isfloat = dt == MPI_FLOAT || dt == MPI_DOUBLE || dt == MPI_REAL || dt == MPI_DOUBLE_PRECISION ||
                  dt == MPI_REAL4 || dt == MPI_REAL8;
    int isint = dt == MPI_INT || dt == MPI_INT32_T || dt == MPI_LONG || dt == MPI_LONG_LONG || dt == MPI_INT64_T ||
                dt == MPI_INTEGER || dt == MPI_INTEGER4 || dt == MPI_INTEGER8;
    int isuint = dt == MPI_UNSIGNED || dt == MPI_UINT32_T || dt == MPI_UNSIGNED_LONG || dt == MPI_UNSIGNED_LONG_LONG ||
                 dt == MPI_UINT64_T;
    if (isfloat && sz == 4)
        *t = NDMA_FLOAT32;
    else if (isfloat && sz == 8)
        *t = NDMA_FLOAT64;
    else if ((isint || (wraps && isuint)) && sz == 4)
        *t = NDMA_INT32;
    else if ((isint || (wraps && isuint)) && sz == 8)
        *t = NDMA_INT64;
    else
        return 0;
    return 1;
}

/* done turns an NDMA result into MPI's: a failure goes to comm's error
 * handler. */
static int done(MPI_Comm comm, int op, int rc) {
    if (rc == NDMA_OK)
        return MPI_SUCCESS;
    int rank = -1;
    PMPI_Comm_rank(comm, &rank);
    fprintf(stderr, "ndma_mpi: %s on rank %d failed: %s: %s\n", op_name[op], rank, ndma_strerror(rc),
            ndma_last_error());
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

/* large reports whether a call of bytes per rank is large enough for NDMA
 * (NDMA_MPI_MIN_BYTES); callers test first that the operation is on and
 * the count positive. */
static inline int large(long long bytes) { return bytes >= g.min_bytes; }

/* gapless reports whether count elements of dt (size sz bytes each) lie
 * in memory as one run of count*sz bytes from buf: a predefined type, or
 * a derived one without holes (MPI_Type_contiguous of one, say). */
static int gapless(MPI_Datatype dt, int sz) {
    int named;
    if (contiguous(dt, &named))
        return 1;
    MPI_Aint lb, extent, tlb, textent;
    if (PMPI_Type_get_extent(dt, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(dt, &tlb, &textent) != MPI_SUCCESS)
        return 0;
    return lb == 0 && tlb == 0 && extent == sz && textent == sz;
}

/* MPI_Bcast goes through NDMA or MPI on what every rank has alike: the
 * number of bytes (MPI requires the same type signature at every rank),
 * never the datatype, which ranks may choose differently (four MPI_INT at
 * the root, a derived type of four ints elsewhere). A datatype with gaps
 * travels packed (MPI_Pack at the root, MPI_Unpack at the others). */
int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm) {
    int sz = 0;
    ndma_comm_t h;
    if (g.on[OP_BCAST] && count > 0 && PMPI_Type_size(dt, &sz) == MPI_SUCCESS && sz > 0 &&
        large((long long)count * sz) && (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_BCAST]);
        size_t n = (size_t)count * sz;
        if (gapless(dt, sz))
            return done(comm, OP_BCAST, ndma_bcast(h, buf, n, root));
        int rank = -1, pos = 0, rc = NDMA_OK;
        PMPI_Comm_rank(comm, &rank);
        void *packed = malloc(n);
        if (packed == NULL) {
            /* Every rank waits for this one in NDMA: fail there too. */
            fprintf(stderr, "ndma_mpi: MPI_Bcast on rank %d: no memory to pack %zu bytes\n", rank, n);
            PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
            return MPI_ERR_NO_MEM;
        }
        if (rank == root && PMPI_Pack(buf, count, dt, packed, (int)n, &pos, comm) != MPI_SUCCESS)
            rc = NDMA_ERR_ARG;
        if (rc == NDMA_OK)
            rc = ndma_bcast(h, packed, n, root);
        pos = 0;
        if (rc == NDMA_OK && rank != root && PMPI_Unpack(packed, (int)n, &pos, buf, count, dt, comm) != MPI_SUCCESS)
            rc = NDMA_ERR_ARG;
        free(packed);
        return done(comm, OP_BCAST, rc);
    }
    tally(&n_mpi[OP_BCAST]);
    return PMPI_Bcast(buf, count, dt, root, comm);
}

int MPI_Allreduce(const void *send, void *recv, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
    ndma_dtype t;
    ndma_op o;
    int sz = 0;
    ndma_comm_t h;
    if (g.on[OP_ALLREDUCE] && count > 0 && reducible(dt, op, &t, &o, &sz) &&
        large((long long)count * sz) && (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_ALLREDUCE]);
        if (send == MPI_IN_PLACE)
            send = recv;
        return done(comm, OP_ALLREDUCE, ndma_allreduce(h, send, recv, (size_t)count, t, o));
    }
    tally(&n_mpi[OP_ALLREDUCE]);
    return PMPI_Allreduce(send, recv, count, dt, op, comm);
}

int MPI_Reduce(const void *send, void *recv, int count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm) {
    ndma_dtype t;
    ndma_op o;
    int sz = 0;
    ndma_comm_t h;
    if (g.on[OP_REDUCE] && count > 0 && reducible(dt, op, &t, &o, &sz) && large((long long)count * sz) &&
        (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_REDUCE]);
        if (send == MPI_IN_PLACE) /* at the root only */
            send = recv;
        return done(comm, OP_REDUCE, ndma_reduce(h, send, recv, (size_t)count, t, o, root));
    }
    tally(&n_mpi[OP_REDUCE]);
    return PMPI_Reduce(send, recv, count, dt, op, root, comm);
}

int MPI_Allgather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount, MPI_Datatype rtype,
                  MPI_Comm comm) {
    int rsz = 0, ssz = 0;
    ndma_comm_t h;
    /* MPI_IN_PLACE is given on every rank or on none. */
    if (g.on[OP_ALLGATHER] && rcount > 0 && contiguous(rtype, &rsz) &&
        (send == MPI_IN_PLACE || (contiguous(stype, &ssz) && (long long)scount * ssz == (long long)rcount * rsz)) &&
        large((long long)rcount * rsz) && (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_ALLGATHER]);
        return done(comm, OP_ALLGATHER,
                    ndma_allgather(h, send == MPI_IN_PLACE ? NULL : send, recv, (size_t)rcount * rsz));
    }
    tally(&n_mpi[OP_ALLGATHER]);
    return PMPI_Allgather(send, scount, stype, recv, rcount, rtype, comm);
}

int MPI_Reduce_scatter_block(const void *send, void *recv, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
    ndma_dtype t;
    ndma_op o;
    int sz = 0;
    ndma_comm_t h;
    if (g.on[OP_REDUCE_SCATTER] && count > 0 && reducible(dt, op, &t, &o, &sz) &&
        large((long long)count * sz) && (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_REDUCE_SCATTER]);
        int n = 0;
        PMPI_Comm_size(comm, &n);
        size_t bytes = (size_t)count * sz;
        void *tmp = NULL;
        if (send == MPI_IN_PLACE) { /* on every rank: recv holds the n blocks */
            if ((tmp = malloc(bytes * n)) == NULL) {
                fprintf(stderr, "ndma_mpi: MPI_Reduce_scatter_block: out of memory\n");
                PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
                return MPI_ERR_NO_MEM;
            }
            memcpy(tmp, recv, bytes * n);
            send = tmp;
        }
        int rc = ndma_reduce_scatter(h, send, recv, (size_t)count, t, o);
        free(tmp);
        return done(comm, OP_REDUCE_SCATTER, rc);
    }
    tally(&n_mpi[OP_REDUCE_SCATTER]);
    return PMPI_Reduce_scatter_block(send, recv, count, dt, op, comm);
}

/* MPI_Reduce_scatter with every rank's count equal is
 * MPI_Reduce_scatter_block (recvcounts is the same array on every rank,
 * so the ranks decide alike). */
int MPI_Reduce_scatter(const void *send, void *recv, const int recvcounts[], MPI_Datatype dt, MPI_Op op,
                       MPI_Comm comm) {
    int n = 0, inter = 0;
    if (g.on[OP_REDUCE_SCATTER] && recvcounts != NULL && PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && !inter &&
        PMPI_Comm_size(comm, &n) == MPI_SUCCESS && n > 0) {
        int equal = 1;
        for (int i = 1; i < n && equal; i++)
            equal = recvcounts[i] == recvcounts[0];
        if (equal)
            return MPI_Reduce_scatter_block(send, recv, recvcounts[0], dt, op, comm);
    }
    tally(&n_mpi[OP_REDUCE_SCATTER]);
    return PMPI_Reduce_scatter(send, recv, recvcounts, dt, op, comm);
}

int MPI_Barrier(MPI_Comm comm) {
    ndma_comm_t h;
    if (g.on[OP_BARRIER] && (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_BARRIER]);
        return done(comm, OP_BARRIER, ndma_barrier(h));
    }
    tally(&n_mpi[OP_BARRIER]);
    return PMPI_Barrier(comm);
}

/* MPI_Gather: the block's bytes are what every rank knows alike (the
 * root's receive count and type, the others' send count and type, equal
 * by MPI's rules). */
int MPI_Gather(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount, MPI_Datatype rtype,
               int root, MPI_Comm comm) {
    int rank = -1, ssz = 0, rsz = 0;
    long long bytes = 0;
    ndma_comm_t h;
    PMPI_Comm_rank(comm, &rank);
    if (rank == root) {
        if (contiguous(rtype, &rsz) &&
            (send == MPI_IN_PLACE || (contiguous(stype, &ssz) && (long long)scount * ssz == (long long)rcount * rsz)))
            bytes = (long long)rcount * rsz;
    } else if (contiguous(stype, &ssz)) {
        bytes = (long long)scount * ssz;
    }
    if (g.on[OP_GATHER] && bytes > 0 && large(bytes) && (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_GATHER]);
        return done(comm, OP_GATHER,
                    ndma_gather(h, send == MPI_IN_PLACE ? NULL : send, rank == root ? recv : NULL, (size_t)bytes, root));
    }
    tally(&n_mpi[OP_GATHER]);
    return PMPI_Gather(send, scount, stype, recv, rcount, rtype, root, comm);
}

/* MPI_Scatter: as MPI_Gather, the root's send count and type against the
 * others' receive count and type. */
int MPI_Scatter(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount, MPI_Datatype rtype,
                int root, MPI_Comm comm) {
    int rank = -1, ssz = 0, rsz = 0;
    long long bytes = 0;
    ndma_comm_t h;
    PMPI_Comm_rank(comm, &rank);
    if (rank == root) {
        if (contiguous(stype, &ssz) &&
            (recv == MPI_IN_PLACE || (contiguous(rtype, &rsz) && (long long)scount * ssz == (long long)rcount * rsz)))
            bytes = (long long)scount * ssz;
    } else if (contiguous(rtype, &rsz)) {
        bytes = (long long)rcount * rsz;
    }
    if (g.on[OP_SCATTER] && bytes > 0 && large(bytes) && (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_SCATTER]);
        return done(comm, OP_SCATTER,
                    ndma_scatter(h, rank == root ? send : NULL, recv == MPI_IN_PLACE ? NULL : recv, (size_t)bytes, root));
    }
    tally(&n_mpi[OP_SCATTER]);
    return PMPI_Scatter(send, scount, stype, recv, rcount, rtype, root, comm);
}

int MPI_Alltoall(const void *send, int scount, MPI_Datatype stype, void *recv, int rcount, MPI_Datatype rtype,
                 MPI_Comm comm) {
    int ssz = 0, rsz = 0;
    ndma_comm_t h;
    /* MPI_IN_PLACE is given on every rank or on none. */
    if (g.on[OP_ALLTOALL] && rcount > 0 && contiguous(rtype, &rsz) &&
        (send == MPI_IN_PLACE || (contiguous(stype, &ssz) && (long long)scount * ssz == (long long)rcount * rsz)) &&
        large((long long)rcount * rsz) && (h = group_of(comm)) != 0) {
        tally(&n_ndma[OP_ALLTOALL]);
        size_t bytes = (size_t)rcount * rsz;
        void *tmp = NULL;
        if (send == MPI_IN_PLACE) { /* recv holds the blocks to send */
            int n = 0;
            PMPI_Comm_size(comm, &n);
            if ((tmp = malloc(bytes * n)) == NULL) {
                fprintf(stderr, "ndma_mpi: MPI_Alltoall: out of memory\n");
                PMPI_Comm_call_errhandler(comm, MPI_ERR_NO_MEM);
                return MPI_ERR_NO_MEM;
            }
            memcpy(tmp, recv, bytes * n);
            send = tmp;
        }
        int rc = ndma_alltoall(h, send, recv, bytes);
        free(tmp);
        return done(comm, OP_ALLTOALL, rc);
    }
    tally(&n_mpi[OP_ALLTOALL]);
    return PMPI_Alltoall(send, scount, stype, recv, rcount, rtype, comm);
}

/* job_name is rank 0's default group name: random enough that two jobs
 * at one switch do not meet. */
static void job_name(char *out, size_t n) {
    uint64_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f == NULL || fread(&x, sizeof x, 1, f) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32);
    }
    if (f != NULL)
        fclose(f);
    snprintf(out, n, "mpi-%016llx", (unsigned long long)x);
}

/* start sets NDMA up after PMPI_Init: rank 0 reads the settings and
 * broadcasts them, then MPI_COMM_WORLD joins its group. */
static void start(void) {
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    struct settings s;
    memset(&s, 0, sizeof s);
    if (world_rank == 0) {
        s.strict = env_int("NDMA_MPI_STRICT", 0) != 0;
        s.verbose = env_int("NDMA_MPI_VERBOSE", 0) != 0;
        s.min_bytes = env_int("NDMA_MPI_MIN_BYTES", 0);
        s.active = env_int("NDMA_MPI", 1) != 0;
        const char *sw = getenv("NDMA_SWITCHES");
        if (sw == NULL || *sw == 0)
            sw = getenv("NDMA_SWITCH");
        if (s.active && ndma_abi_version() != NDMA_ABI_VERSION) {
            fprintf(stderr, "ndma_mpi: libndma has ABI version %d, this library was built for %d: %s\n",
                    ndma_abi_version(), NDMA_ABI_VERSION,
                    s.strict ? "aborting (NDMA_MPI_STRICT=1)" : "MPI collectives run on MPI's own");
            s.active = 0;
        } else if (s.active && (sw == NULL || *sw == 0)) {
            fprintf(stderr, "ndma_mpi: neither NDMA_SWITCH nor NDMA_SWITCHES is set: %s\n",
                    s.strict ? "aborting (NDMA_MPI_STRICT=1)" : "MPI collectives run on MPI's own");
            s.active = 0;
        }
        if (!s.active && s.strict && env_int("NDMA_MPI", 1) != 0)
            PMPI_Abort(MPI_COMM_WORLD, 1);
        const char *job = getenv("NDMA_JOB");
        if (job != NULL && *job != 0 && strlen(job) <= JOB_MAX_LEN) {
            snprintf(s.job, sizeof s.job, "%s", job);
        } else {
            if (job != NULL && *job != 0)
                fprintf(stderr, "ndma_mpi: NDMA_JOB is longer than %d bytes: using a random job name\n", JOB_MAX_LEN);
            job_name(s.job, sizeof s.job);
        }
        for (int i = 0; i < NOPS; i++)
            s.on[i] = s.active && env_int(op_env[i], 1) != 0;
    }
    PMPI_Bcast(&s, sizeof s, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (!s.active)
        return;
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, group_delete, &keyval, NULL) != MPI_SUCCESS) {
        if (world_rank == 0)
            fprintf(stderr, "ndma_mpi: no attribute keyval: MPI collectives run on MPI's own\n");
        return;
    }
    g = s;
    struct group *gr = join(MPI_COMM_WORLD);
    if (gr == NULL || gr->h == 0) {
        memset(g.on, 0, sizeof g.on);
        return;
    }
    if (g.verbose && world_rank == 0) {
        int n = 0;
        PMPI_Comm_size(MPI_COMM_WORLD, &n);
        const char *sw = getenv("NDMA_SWITCHES");
        if (sw == NULL || *sw == 0)
            sw = getenv("NDMA_SWITCH");
        fprintf(stderr, "ndma_mpi: %d ranks joined group %s at %s (min %lld bytes;", n, g.job, sw ? sw : "?",
                g.min_bytes);
        for (int i = 0; i < NOPS; i++)
            fprintf(stderr, " %s %s", op_name[i], g.on[i] ? "on" : "off");
        int local = 1;
        if (ndma_comm_local_size(gr->h, &local) == NDMA_OK && local > 1)
            fprintf(stderr, "; %d ranks of this host share memory", local);
        fprintf(stderr, ")\n");
    }
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS)
        start();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS)
        start();
    return rc;
}

int MPI_Finalize(void) {
    if (g.active && !finalized) {
        finalized = 1;
        if (g.verbose) {
            fprintf(stderr, "ndma_mpi: rank %d: calls through NDMA / MPI:", world_rank);
            for (int i = 0; i < NOPS; i++)
                fprintf(stderr, " %s %llu/%llu", op_name[i] + 4, n_ndma[i], n_mpi[i]);
            fprintf(stderr, "\n");
        }
        memset(g.on, 0, sizeof g.on);
        /* Leave every group still joined (communicators never freed):
         * their attributes may outlive this, so only their handles go. */
        pthread_mutex_lock(&mu);
        for (struct group *gr = groups.next; gr != &groups; gr = gr->next) {
            if (gr->h != 0 && ndma_comm_free(gr->h) != NDMA_OK)
                fprintf(stderr, "ndma_mpi: leaving a group: %s\n", ndma_last_error());
            gr->h = 0;
        }
        pthread_mutex_unlock(&mu);
    }
    return PMPI_Finalize();
}
