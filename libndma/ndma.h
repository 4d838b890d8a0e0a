/*
 * ndma.h: the C interface of NDMA's collectives (libndma).
 *
 * A communicator is a group of ranks that run collectives together, MPI
 * style: every rank calls the same collectives in the same order with
 * matching arguments. With a forwarding node (switch) the collectives run
 * in the network (one multicast or one aggregation through the switch);
 * the library picks the algorithm per call unless NDMA_ALGO_<OP> says
 * (NDMA_ALGO_ALLREDUCE=ring, NDMA_ALGO_BCAST=innet...).
 *
 * Build: `make libndma` writes build/libndma.so (and build/libndma.a) and
 * copies this header to build/include/ndma.h. Link with -lndma (and
 * -lpthread). Programs in C, C++ or anything with a C FFI (Python's
 * ctypes: see python/ndma) use it.
 *
 * Conventions:
 *   - Every function returns an ndma error code: NDMA_OK (0) or one of
 *     NDMA_ERR_*; ndma_strerror names a code and ndma_last_error gives
 *     the message of the calling thread's last failure (which says what
 *     went wrong: the rank that died, the variable that is missing...).
 *   - Communicators and requests are integer handles, never pointers;
 *     0 is no handle. A handle freed, or never made, is refused with
 *     NDMA_ERR_ARG, never a crash.
 *   - Buffers are the caller's memory, used in place: a blocking call
 *     uses them until it returns; a non-blocking call until the request
 *     completes (ndma_wait returns, or ndma_test sets *done). The library
 *     keeps no pointer to them afterwards.
 *   - Counts are in elements of the call's data type; byte sizes (bcast,
 *     allgather) in bytes. Data is in the machine's byte order
 *     (little-endian, as NDMA memory is).
 *   - Thread safety: every function may be called from any thread. A
 *     communicator's collectives must still be issued in the same order
 *     on every rank: when several threads of a rank issue them, the
 *     program orders them (as MPI requires).
 *   - Errors in Go never cross into C: an internal failure is returned
 *     as NDMA_ERR_INTERNAL with its message, not a crash.
 */
#ifndef NDMA_H
#define NDMA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NDMA_ABI_VERSION changes when a declaration in this header changes in
 * a way that breaks programs built against an earlier one. */
#define NDMA_ABI_VERSION 1

/* Error codes. */
enum {
    NDMA_OK = 0,
    NDMA_ERR_ARG = 1,         /* invalid argument or handle */
    NDMA_ERR_ENV = 2,         /* no or invalid launch environment */
    NDMA_ERR_NO_SWITCH = 3,   /* no switch answers at the address given */
    NDMA_ERR_RENDEZVOUS = 4,  /* the ranks did not all join in time, or the
                                 rank is taken by another process */
    NDMA_ERR_AUTH = 5,        /* refused: wrong fabric token or credential,
                                 or none where the switch requires one */
    NDMA_ERR_RANK = 6,        /* a rank died, left or went silent */
    NDMA_ERR_TIMEOUT = 7,     /* the call's time limit passed */
    NDMA_ERR_CLOSED = 8,      /* the communicator was freed */
    NDMA_ERR_INTERNAL = 9,    /* anything else (the message says what) */
    NDMA_ERR_POOL = 10,       /* the memory pool has no room, not enough live
                                 memory nodes, or lost the data (a memory
                                 node that held the only copy restarted) */
    NDMA_ERR_COUNT = 11       /* number of codes; not a code */
};

/* Element types. */
typedef enum {
    NDMA_FLOAT32 = 1,
    NDMA_FLOAT64 = 2,
    NDMA_INT32 = 3,
    NDMA_INT64 = 4
} ndma_dtype;

/* Element-wise reductions (integer sums and products wrap). */
typedef enum {
    NDMA_SUM = 1,
    NDMA_PROD = 2,
    NDMA_MIN = 3,
    NDMA_MAX = 4
} ndma_op;

/* Handles. 0 is none. */
typedef uint64_t ndma_comm_t;
typedef uint64_t ndma_request_t;

/* An explicit launch (ndma_comm_create). Initialize with ndma_config_init,
 * then set the fields: fields added in later versions keep their
 * defaults in programs built against this header. */
typedef struct ndma_config {
    size_t struct_size;      /* sizeof(ndma_config), set by ndma_config_init */
    int rank;                /* this process's rank, 0 <= rank < size */
    int size;                /* number of ranks */
    const char *switch_addr; /* the switch, "host:port" (required), or a
                                comma-separated list of switches to shard
                                the in-network collectives over */
    const char *job;         /* job name every rank gives; NULL: "ndma" */
    const char *token;       /* fabric token; NULL only with insecure */
    int insecure;            /* 1: seal nothing, at a fabric started with
                                --insecure (the token then optional) */
    const char *credential;  /* credential (role member) to seal every
                                datagram with: its file, or the directory
                                ndma fabric init wrote (JOB/RANK.cred in
                                it); NULL only with insecure */
    const char *listen;      /* local UDP address; NULL: ":0" */
    int mtu;                 /* largest datagram in bytes; 0: default */
    int join_timeout_ms;     /* rendezvous bound; 0: 60 s */
    int timeout_ms;          /* bound of each collective; 0: none (a dead
                                rank is still reported by the switch) */
    int deterministic;       /* 1: in-network reductions combine in rank
                                order, so results are bitwise reproducible */
    int hierarchy;           /* NDMA_HIERARCHY_AUTO: ranks that share a host
                                run collectives through shared memory
                                (below); NDMA_HIERARCHY_OFF: every rank
                                over the network; 0: the default, auto */
    const char *host_id;     /* with the hierarchy, this rank's host: ranks
                                given the same id share memory (and must
                                share /dev/shm); NULL: the library tells
                                hosts apart itself (boot id, host name,
                                the /dev/shm the process sees) */
} ndma_config;

/* Values of ndma_config.hierarchy (NDMA_HIERARCHY=auto or off for the
 * launch from the environment; auto when unset: every rank of a
 * communicator must make the same choice). With the hierarchy, when
 * some host runs more than one rank of a communicator, every collective
 * (blocking or not) runs in two levels: the
 * host's ranks through a shared-memory segment, the network only between
 * one leader per host (its lowest rank), then back to the host's ranks;
 * a job on one host sends no datagram for them. */
enum {
    NDMA_HIERARCHY_DEFAULT = 0,
    NDMA_HIERARCHY_OFF = 1,
    NDMA_HIERARCHY_AUTO = 2
};

/* ndma_config_init fills cfg with the defaults (rank and size -1: unset). */
void ndma_config_init(ndma_config *cfg);

/* ndma_comm_from_env creates the world communicator of a process started
 * by a launcher: the rank and size from NDMA_RANK/NDMA_SIZE, Open MPI's
 * mpirun (OMPI_COMM_WORLD_RANK/SIZE), PMI (MPICH), Slurm's srun or
 * torchrun (RANK/WORLD_SIZE); the switch from NDMA_SWITCH, the rank's
 * credential from NDMA_CREDENTIAL (its file, or the directory ndma fabric
 * init wrote: JOB/RANK.cred in it) and the token from NDMA_TOKEN, or
 * NDMA_INSECURE=1 to seal nothing (neither is NDMA_ERR_ARG), and NDMA_JOB,
 * NDMA_MTU, NDMA_JOIN_TIMEOUT, NDMA_LIVENESS, NDMA_LISTEN, NDMA_BUSY_POLL,
 * NDMA_TIMEOUT (a Go duration such as "30s": each collective's bound) and
 * NDMA_DETERMINISTIC=1 if set, NDMA_HIERARCHY (auto, the default, or
 * off: see ndma_config.hierarchy) and NDMA_HOST_ID (ndma_config.host_id). It
 * blocks until every rank has joined. */
int ndma_comm_from_env(ndma_comm_t *comm);

/* ndma_comm_from_env_as is ndma_comm_from_env for a group the program
 * forms itself (a sub-communicator, as MPI_Comm_split makes): the
 * environment gives the switch, token, credential and the other settings,
 * the arguments the job name (1 to 64 bytes, the same on every rank of
 * the group and unique among the groups at the switch), this process's
 * rank and the group's size. Each group is an endpoint of its own: the
 * host of NDMA_LISTEN is kept, its port is not (the system picks one). */
int ndma_comm_from_env_as(const char *job, int rank, int size, ndma_comm_t *comm);

/* ndma_comm_create is ndma_comm_from_env with the launch given in cfg. */
int ndma_comm_create(const ndma_config *cfg, ndma_comm_t *comm);

/* ndma_comm_free leaves the group and frees the communicator. Requests
 * still in flight on it, and blocking calls other threads are making on
 * it, fail with NDMA_ERR_CLOSED (wait for or test such requests to free
 * them); it returns once none of them uses its buffers any longer. */
int ndma_comm_free(ndma_comm_t comm);

/* Settings of a communicator, from the next call on (every rank should
 * make the same ones): ndma_comm_set_algo fixes the algorithm of one
 * operation ("allreduce", "bcast", "reduce", "allgather",
 * "reducescatter", "barrier") by name ("innet", "ring",
 * "recursive_doubling", "rabenseifner", "binomial", "chain",
 * "scatter_allgather", "direct"; "auto" or NULL: the tuner's choice,
 * or NDMA_ALGO_<OP> from the environment the process started with);
 * ndma_comm_set_deterministic makes in-network reductions combine in rank
 * order (bitwise reproducible); ndma_comm_set_timeout bounds each later
 * collective (0: no bound). */
int ndma_comm_set_algo(ndma_comm_t comm, const char *op, const char *algo);
int ndma_comm_set_deterministic(ndma_comm_t comm, int on);
int ndma_comm_set_timeout(ndma_comm_t comm, int timeout_ms);

int ndma_comm_rank(ndma_comm_t comm, int *rank);
int ndma_comm_size(ndma_comm_t comm, int *size);
/* ndma_comm_local_size gives the number of the communicator's ranks on
 * this rank's host that run collectives together through shared memory
 * (the hierarchy): 1 when the hierarchy is off or this rank is alone on
 * its host. */
int ndma_comm_local_size(ndma_comm_t comm, int *size);

/* Blocking collectives. send == recv means in place where noted. */

/* recv[i] = op over ranks of send[i]; send may equal recv. */
int ndma_allreduce(ndma_comm_t comm, const void *send, void *recv, size_t count,
                   ndma_dtype dtype, ndma_op op);
/* root's buf (bytes) to every rank's buf. As with MPI, the root may
 * return once buf can be reused (in-network, a message of at most 16 KiB
 * is copied and sent in the background), the others once they have it. */
int ndma_bcast(ndma_comm_t comm, void *buf, size_t bytes, int root);
/* as allreduce, result at root only (recv may be NULL elsewhere); at the
 * root send may equal recv. */
int ndma_reduce(ndma_comm_t comm, const void *send, void *recv, size_t count,
                ndma_dtype dtype, ndma_op op, int root);
/* recv holds size blocks of bytes bytes, block i from rank i; send NULL
 * means in place (this rank's block is already in recv). */
int ndma_allgather(ndma_comm_t comm, const void *send, void *recv, size_t bytes);
/* send holds size blocks of count elements; block i of the reduction lands
 * in rank i's recv (count elements). */
int ndma_reduce_scatter(ndma_comm_t comm, const void *send, void *recv, size_t count,
                        ndma_dtype dtype, ndma_op op);
int ndma_barrier(ndma_comm_t comm);
/* root's recv holds size blocks of bytes bytes, block i from rank i's send
 * (recv may be NULL elsewhere); send NULL at the root means in place (its
 * block is already in recv). */
int ndma_gather(ndma_comm_t comm, const void *send, void *recv, size_t bytes, int root);
/* root's send holds size blocks of bytes bytes; rank i gets block i in
 * recv (send may be NULL elsewhere); recv NULL at the root means in place
 * (its block stays in send). */
int ndma_scatter(ndma_comm_t comm, const void *send, void *recv, size_t bytes, int root);
/* send holds size blocks of bytes bytes, block j for rank j; recv gets
 * size blocks, block i from rank i. */
int ndma_alltoall(ndma_comm_t comm, const void *send, void *recv, size_t bytes);

/* Non-blocking forms: the same arguments, and *req to wait on. */
int ndma_iallreduce(ndma_comm_t comm, const void *send, void *recv, size_t count,
                    ndma_dtype dtype, ndma_op op, ndma_request_t *req);
int ndma_ibcast(ndma_comm_t comm, void *buf, size_t bytes, int root, ndma_request_t *req);
int ndma_ireduce(ndma_comm_t comm, const void *send, void *recv, size_t count,
                 ndma_dtype dtype, ndma_op op, int root, ndma_request_t *req);
int ndma_iallgather(ndma_comm_t comm, const void *send, void *recv, size_t bytes,
                    ndma_request_t *req);
int ndma_ireduce_scatter(ndma_comm_t comm, const void *send, void *recv, size_t count,
                         ndma_dtype dtype, ndma_op op, ndma_request_t *req);
int ndma_ibarrier(ndma_comm_t comm, ndma_request_t *req);
int ndma_igather(ndma_comm_t comm, const void *send, void *recv, size_t bytes, int root,
                 ndma_request_t *req);
int ndma_iscatter(ndma_comm_t comm, const void *send, void *recv, size_t bytes, int root,
                  ndma_request_t *req);
int ndma_ialltoall(ndma_comm_t comm, const void *send, void *recv, size_t bytes,
                   ndma_request_t *req);

/* ndma_wait blocks until req completes, frees it and returns the
 * collective's result. */
int ndma_wait(ndma_request_t req);
/* ndma_test sets *done to 1 if req has completed (then frees it and
 * returns the collective's result) or 0 (and returns NDMA_OK). */
int ndma_test(ndma_request_t req, int *done);

/* ndma_request_notify has fn(arg) called once req has completed: on a
 * thread of the library, soon after the completion (at once if req has
 * already completed), so that an event loop or a framework's future
 * learns of it without a thread of its own blocked in ndma_wait. req
 * stays valid: ndma_wait or ndma_test, from fn or later, returns its
 * result at once and frees it. fn should return quickly (the library's
 * thread runs it); it may call any function of this header but
 * ndma_comm_free of req's communicator. One notification per request:
 * a second one is NDMA_ERR_ARG. */
typedef void (*ndma_notify_fn)(void *arg);
int ndma_request_notify(ndma_request_t req, ndma_notify_fn fn, void *arg);

/* Memory pool regions.
 *
 * A region is memory lent to the switch's pool by memory nodes (ndma
 * memd), striped over them and shared by the ranks of a communicator:
 * any rank reads and writes any byte, and the memory nodes apply
 * optimizer steps to it in place (the parameters and their optimizer
 * state live in the pool, not in the ranks). Every access goes through
 * the switch with the region's key, a capability the library keeps to
 * itself (it never appears in messages). Offsets and sizes are in bytes;
 * data in the machine's byte order. A fresh region reads as zeros.
 *
 * Region calls are blocking and may be made from any thread,
 * concurrently with each other and with collectives (they are not
 * collectives: each rank makes its own, except alloc and free). A
 * region lives until ndma_region_free or until its communicator is
 * freed; the rank that created it (rank 0) gives its memory back then. */
typedef uint64_t ndma_region_t;

/* ndma_region_alloc creates a region of bytes bytes (collective: every
 * rank of comm calls it with the same arguments; rank 0 creates the
 * region, the others open it). stripe is the interleave unit over the
 * memory nodes, a multiple of 8 bytes (0: 64 KiB). Fails with
 * NDMA_ERR_POOL on every rank when the pool has no room. */
int ndma_region_alloc(ndma_comm_t comm, uint64_t bytes, uint64_t stripe, ndma_region_t *region);
/* ndma_region_free frees the region (collective: the ranks meet in a
 * barrier, then rank 0 gives the memory back, scrubbed before reuse).
 * The handle is invalid on every rank afterwards, even when it fails. */
int ndma_region_free(ndma_region_t region);
int ndma_region_size(ndma_region_t region, uint64_t *bytes);
/* Copy bytes bytes between buf and the region at offset. */
int ndma_region_write(ndma_region_t region, uint64_t offset, const void *buf, size_t bytes);
int ndma_region_read(ndma_region_t region, uint64_t offset, void *buf, size_t bytes);

/* Optimizer steps applied by the memory nodes (MemoryX-style offload).
 * With g the gradient plus weight_decay * p, per float32 element:
 *   NDMA_OPTIM_SGD:  m = beta1*m + g;  p = p - lr*m   (PyTorch's SGD with
 *                    momentum beta1, no dampening)
 *   NDMA_OPTIM_ADAM: m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g;
 *                    p = p - lr * (m / (1-beta1^step)) / (sqrt(v / (1-beta2^step)) + eps)
 * The parameters are float32 at offset; the first moment m lives at
 * offset + stride and Adam's second moment v at offset + 2*stride, in
 * the same region (a fresh region's zeros are the right initial state).
 * stride must be a multiple of ndma_region_state_stride's answer (which
 * keeps a parameter and its state on one memory node). */
enum {
    NDMA_OPTIM_SGD = 1,
    NDMA_OPTIM_ADAM = 2
};

typedef struct ndma_optim {
    size_t struct_size; /* sizeof(ndma_optim), set by ndma_optim_init */
    int algo;           /* NDMA_OPTIM_SGD or NDMA_OPTIM_ADAM */
    uint32_t step;      /* Adam: the step number, from 1 */
    float lr;           /* learning rate, >= 0 */
    float beta1;        /* SGD: momentum; Adam: first-moment decay, in [0, 1) */
    float beta2;        /* Adam: second-moment decay, in [0, 1) */
    float eps;          /* Adam: > 0 */
    float weight_decay;
} ndma_optim;

/* ndma_optim_init fills o with Adam's usual defaults (lr 1e-3, betas 0.9
 * and 0.999, eps 1e-8, step 1, no weight decay). */
void ndma_optim_init(ndma_optim *o);
/* ndma_region_state_stride sets *stride to the smallest optimizer state
 * stride for bytes bytes of parameters in region. */
int ndma_region_state_stride(ndma_region_t region, uint64_t bytes, uint64_t *stride);
/* ndma_region_optim_step sends count float32 gradients for the
 * parameters at offset (a multiple of 4); the memory nodes update the
 * parameters and their state in place. Each piece is applied once even
 * when the network makes the library send it again. */
int ndma_region_optim_step(ndma_region_t region, uint64_t offset, uint64_t stride, const ndma_optim *o,
                           const float *grads, size_t count);

/* ndma_strerror names an error code (a static string). */
const char *ndma_strerror(int code);
/* ndma_last_error is the message of the last call that failed on the
 * calling thread ("" if none), valid until that thread's next failing
 * call. */
const char *ndma_last_error(void);
/* ndma_abi_version returns the NDMA_ABI_VERSION the library was built
 * with: compare it with the header's. */
int ndma_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* NDMA_H */
