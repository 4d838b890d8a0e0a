// The functions of ndma.h: each checks nothing itself and calls its Go
// implementation (libndma.go), which cgo exports as ndmago_*. They exist
// so that ndma.h can declare const pointers, which cgo's exports cannot.

#include <string.h>

#include "ndma.h"
#include "_cgo_export.h"

void ndma_config_init(ndma_config *cfg) {
    if (cfg == NULL) {
        return;
    }
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->rank = -1;
    cfg->size = -1;
}

int ndma_comm_from_env(ndma_comm_t *comm) { return ndmago_comm_from_env(comm); }

int ndma_comm_from_env_as(const char *job, int rank, int size, ndma_comm_t *comm) {
    return ndmago_comm_from_env_as((char *)job, rank, size, comm);
}

int ndma_comm_create(const ndma_config *cfg, ndma_comm_t *comm) {
    return ndmago_comm_create((ndma_config *)cfg, comm);
}

int ndma_comm_free(ndma_comm_t comm) { return ndmago_comm_free(comm); }

int ndma_comm_set_algo(ndma_comm_t comm, const char *op, const char *algo) {
    return ndmago_comm_set_algo(comm, (char *)op, (char *)algo);
}

int ndma_comm_set_deterministic(ndma_comm_t comm, int on) { return ndmago_comm_set_deterministic(comm, on); }

int ndma_comm_set_timeout(ndma_comm_t comm, int timeout_ms) { return ndmago_comm_set_timeout(comm, timeout_ms); }

int ndma_comm_rank(ndma_comm_t comm, int *rank) { return ndmago_comm_rank(comm, rank); }

int ndma_comm_size(ndma_comm_t comm, int *size) { return ndmago_comm_size(comm, size); }

int ndma_comm_local_size(ndma_comm_t comm, int *size) { return ndmago_comm_local_size(comm, size); }

int ndma_allreduce(ndma_comm_t comm, const void *send, void *recv, size_t count,
                   ndma_dtype dtype, ndma_op op) {
    return ndmago_reduce(comm, 0, (void *)send, recv, count, dtype, op, -1, NULL);
}

int ndma_iallreduce(ndma_comm_t comm, const void *send, void *recv, size_t count,
                    ndma_dtype dtype, ndma_op op, ndma_request_t *req) {
    return ndmago_reduce(comm, 0, (void *)send, recv, count, dtype, op, -1, req);
}

int ndma_reduce(ndma_comm_t comm, const void *send, void *recv, size_t count,
                ndma_dtype dtype, ndma_op op, int root) {
    return ndmago_reduce(comm, 1, (void *)send, recv, count, dtype, op, root, NULL);
}

int ndma_ireduce(ndma_comm_t comm, const void *send, void *recv, size_t count,
                 ndma_dtype dtype, ndma_op op, int root, ndma_request_t *req) {
    return ndmago_reduce(comm, 1, (void *)send, recv, count, dtype, op, root, req);
}

int ndma_reduce_scatter(ndma_comm_t comm, const void *send, void *recv, size_t count,
                        ndma_dtype dtype, ndma_op op) {
    return ndmago_reduce(comm, 2, (void *)send, recv, count, dtype, op, -1, NULL);
}

int ndma_ireduce_scatter(ndma_comm_t comm, const void *send, void *recv, size_t count,
                         ndma_dtype dtype, ndma_op op, ndma_request_t *req) {
    return ndmago_reduce(comm, 2, (void *)send, recv, count, dtype, op, -1, req);
}

int ndma_bcast(ndma_comm_t comm, void *buf, size_t bytes, int root) {
    return ndmago_bcast(comm, buf, bytes, root, NULL);
}

int ndma_ibcast(ndma_comm_t comm, void *buf, size_t bytes, int root, ndma_request_t *req) {
    return ndmago_bcast(comm, buf, bytes, root, req);
}

int ndma_allgather(ndma_comm_t comm, const void *send, void *recv, size_t bytes) {
    return ndmago_allgather(comm, (void *)send, recv, bytes, NULL);
}

int ndma_iallgather(ndma_comm_t comm, const void *send, void *recv, size_t bytes,
                    ndma_request_t *req) {
    return ndmago_allgather(comm, (void *)send, recv, bytes, req);
}

int ndma_barrier(ndma_comm_t comm) { return ndmago_barrier(comm, NULL); }

int ndma_ibarrier(ndma_comm_t comm, ndma_request_t *req) { return ndmago_barrier(comm, req); }

int ndma_gather(ndma_comm_t comm, const void *send, void *recv, size_t bytes, int root) {
    return ndmago_blocks(comm, 0, (void *)send, recv, bytes, root, NULL);
}

int ndma_igather(ndma_comm_t comm, const void *send, void *recv, size_t bytes, int root,
                 ndma_request_t *req) {
    return ndmago_blocks(comm, 0, (void *)send, recv, bytes, root, req);
}

int ndma_scatter(ndma_comm_t comm, const void *send, void *recv, size_t bytes, int root) {
    return ndmago_blocks(comm, 1, (void *)send, recv, bytes, root, NULL);
}

int ndma_iscatter(ndma_comm_t comm, const void *send, void *recv, size_t bytes, int root,
                  ndma_request_t *req) {
    return ndmago_blocks(comm, 1, (void *)send, recv, bytes, root, req);
}

int ndma_alltoall(ndma_comm_t comm, const void *send, void *recv, size_t bytes) {
    return ndmago_blocks(comm, 2, (void *)send, recv, bytes, -1, NULL);
}

int ndma_ialltoall(ndma_comm_t comm, const void *send, void *recv, size_t bytes,
                   ndma_request_t *req) {
    return ndmago_blocks(comm, 2, (void *)send, recv, bytes, -1, req);
}

int ndma_region_alloc(ndma_comm_t comm, uint64_t bytes, uint64_t stripe, ndma_region_t *region) {
    return ndmago_region_alloc(comm, bytes, stripe, region);
}

int ndma_region_free(ndma_region_t region) { return ndmago_region_free(region); }

int ndma_region_size(ndma_region_t region, uint64_t *bytes) { return ndmago_region_size(region, bytes); }

int ndma_region_write(ndma_region_t region, uint64_t offset, const void *buf, size_t bytes) {
    return ndmago_region_io(region, 1, offset, (void *)buf, bytes);
}

int ndma_region_read(ndma_region_t region, uint64_t offset, void *buf, size_t bytes) {
    return ndmago_region_io(region, 0, offset, buf, bytes);
}

void ndma_optim_init(ndma_optim *o) {
    if (o == NULL) {
        return;
    }
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->algo = NDMA_OPTIM_ADAM;
    o->step = 1;
    o->lr = 1e-3f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
}

int ndma_region_state_stride(ndma_region_t region, uint64_t bytes, uint64_t *stride) {
    return ndmago_region_state_stride(region, bytes, stride);
}

int ndma_region_optim_step(ndma_region_t region, uint64_t offset, uint64_t stride, const ndma_optim *o,
                           const float *grads, size_t count) {
    return ndmago_region_optim_step(region, offset, stride, (ndma_optim *)o, (float *)grads, count);
}

int ndma_wait(ndma_request_t req) { return ndmago_wait(req); }

int ndma_test(ndma_request_t req, int *done) { return ndmago_test(req, done); }

int ndma_request_notify(ndma_request_t req, ndma_notify_fn fn, void *arg) {
    return ndmago_request_notify(req, (void *)fn, arg);
}

/* ndma_call_notify runs a notification for the Go side, which cannot
 * call a C function pointer itself. */
__attribute__((visibility("hidden"))) void ndma_call_notify(void *fn, void *arg) { ((ndma_notify_fn)fn)(arg); }

const char *ndma_strerror(int code) {
    static const char *const names[NDMA_ERR_COUNT] = {
        [NDMA_OK] = "success",
        [NDMA_ERR_ARG] = "invalid argument",
        [NDMA_ERR_ENV] = "no or invalid launch environment",
        [NDMA_ERR_NO_SWITCH] = "no switch answers",
        [NDMA_ERR_RENDEZVOUS] = "rendezvous failed",
        [NDMA_ERR_AUTH] = "not authorized",
        [NDMA_ERR_RANK] = "a rank failed",
        [NDMA_ERR_TIMEOUT] = "timed out",
        [NDMA_ERR_CLOSED] = "communicator freed",
        [NDMA_ERR_INTERNAL] = "internal error",
        [NDMA_ERR_POOL] = "memory pool has no room or lost the data",
    };
    if (code < 0 || code >= NDMA_ERR_COUNT) {
        return "unknown error code";
    }
    return names[code];
}

const char *ndma_last_error(void) { return ndmago_last_error(); }

int ndma_abi_version(void) { return NDMA_ABI_VERSION; }
