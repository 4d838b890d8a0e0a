// collectives.c: libndma's C test. Run as one process per rank (NDMA_RANK,
// NDMA_SIZE, NDMA_SWITCH, NDMA_TOKEN or NDMA_INSECURE, NDMA_JOB), it checks
// every collective of ndma.h, blocking and non-blocking, over every data
// type and reduction, against results computed here, then the errors a
// caller can make. It prints "ok" and exits 0, or names the first
// mismatch and exits 1.

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ndma.h"

static int rank, size;

#define CHECK(call)                                                                       \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != NDMA_OK) {                                                             \
            fprintf(stderr, "rank %d: %s:%d: %s: %s (%s)\n", rank, __FILE__, __LINE__, #call, \
                    ndma_strerror(rc_), ndma_last_error());                               \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static const ndma_dtype dtypes[] = {NDMA_FLOAT32, NDMA_FLOAT64, NDMA_INT32, NDMA_INT64};
static const ndma_op ops[] = {NDMA_SUM, NDMA_PROD, NDMA_MIN, NDMA_MAX};
static const size_t counts[] = {0, 1, 7, 1000, 50001};

static size_t esize(ndma_dtype dt) { return dt == NDMA_FLOAT32 || dt == NDMA_INT32 ? 4 : 8; }

// value is rank r's input at index i: small integers, so that float sums
// and products are exact whatever the order.
static int64_t value(int r, size_t i) { return (int64_t)((i * 7 + (size_t)r * 3) % 5) - 1; }

static void put(void *buf, ndma_dtype dt, size_t i, int64_t v) {
    switch (dt) {
    case NDMA_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case NDMA_FLOAT64: ((double *)buf)[i] = (double)v; break;
    case NDMA_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case NDMA_INT64: ((int64_t *)buf)[i] = v; break;
    }
}

static int64_t get(const void *buf, ndma_dtype dt, size_t i) {
    switch (dt) {
    case NDMA_FLOAT32: return (int64_t)((const float *)buf)[i];
    case NDMA_FLOAT64: return (int64_t)((const double *)buf)[i];
    case NDMA_INT32: return ((const int32_t *)buf)[i];
    case NDMA_INT64: return ((const int64_t *)buf)[i];
    }
    return 0;
}

static int64_t fold(ndma_op op, int64_t a, int64_t b) {
    switch (op) {
    case NDMA_SUM: return a + b;
    case NDMA_PROD: return a * b;
    case NDMA_MIN: return a < b ? a : b;
    case NDMA_MAX: return a > b ? a : b;
    }
    return 0;
}

// expected is the reduction over all ranks at index i.
static int64_t expected(ndma_op op, size_t i) {
    int64_t acc = value(0, i);
    for (int r = 1; r < size; r++) {
        acc = fold(op, acc, value(r, i));
    }
    return acc;
}

static void fill(void *buf, ndma_dtype dt, size_t n, int r, size_t base) {
    for (size_t i = 0; i < n; i++) {
        put(buf, dt, i, value(r, base + i));
    }
}

static void test_reductions(ndma_comm_t comm) {
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        ndma_dtype dt = dtypes[d];
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            ndma_op op = ops[o];
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                size_t n = counts[c], es = esize(dt);
                char *send = malloc(n * es * size + 1), *recv = malloc(n * es * size + 1);
                // allreduce, then in place
                fill(send, dt, n, rank, 0);
                CHECK(ndma_allreduce(comm, send, recv, n, dt, op));
                for (size_t i = 0; i < n; i++) {
                    EXPECT(get(recv, dt, i) == expected(op, i), "allreduce dt %d op %d n %zu [%zu]: %lld, want %lld",
                           dt, op, n, i, (long long)get(recv, dt, i), (long long)expected(op, i));
                    EXPECT(get(send, dt, i) == value(rank, i), "allreduce changed send");
                }
                fill(recv, dt, n, rank, 0);
                CHECK(ndma_allreduce(comm, recv, recv, n, dt, op));
                for (size_t i = 0; i < n; i++) {
                    EXPECT(get(recv, dt, i) == expected(op, i), "allreduce in place dt %d op %d n %zu [%zu]", dt, op, n, i);
                }
                // reduce to every root (in place at the root on odd roots)
                for (int root = 0; root < size; root++) {
                    int inplace = root % 2 == 1 && rank == root;
                    fill(inplace ? recv : send, dt, n, rank, 0);
                    CHECK(ndma_reduce(comm, inplace ? recv : send, rank == root ? recv : NULL, n, dt, op, root));
                    if (rank == root) {
                        for (size_t i = 0; i < n; i++) {
                            EXPECT(get(recv, dt, i) == expected(op, i), "reduce root %d dt %d op %d n %zu [%zu]", root, dt, op, n, i);
                        }
                    }
                }
                // reduce_scatter: block b of the input is the values at
                // indices b*n..(b+1)*n
                fill(send, dt, n * size, rank, 0);
                CHECK(ndma_reduce_scatter(comm, send, recv, n, dt, op));
                for (size_t i = 0; i < n; i++) {
                    EXPECT(get(recv, dt, i) == expected(op, (size_t)rank * n + i), "reduce_scatter dt %d op %d n %zu [%zu]", dt, op, n, i);
                }
                free(send);
                free(recv);
            }
        }
    }
}

// block is the byte i of the block rank from sends to rank to.
static unsigned char block(int from, int to, size_t i) { return (unsigned char)(i * 13 + 7 * from + 3 * to); }

// test_blocks checks gather, scatter (every root, in place at the root
// too) and alltoall of n bytes per block; buf holds size blocks, mine one.
static void test_blocks(ndma_comm_t comm, size_t n, unsigned char *buf, unsigned char *mine) {
    unsigned char *send = malloc(n * size + 1);
    for (int root = 0; root < size; root++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t i = 0; i < n; i++) {
                mine[i] = block(rank, root, i);
            }
            memset(buf, 0, n * size);
            if (inplace && rank == root) {
                memcpy(buf + rank * n, mine, n);
            }
            CHECK(ndma_gather(comm, inplace && rank == root ? NULL : mine, rank == root ? buf : NULL, n, root));
            for (int r = 0; rank == root && r < size; r++) {
                for (size_t i = 0; i < n; i++) {
                    EXPECT(buf[r * n + i] == block(r, root, i), "gather root %d in place %d n %zu block %d [%zu]", root,
                           inplace, n, r, i);
                }
            }
            for (int r = 0; r < size; r++) {
                for (size_t i = 0; i < n; i++) {
                    send[r * n + i] = block(root, r, i);
                }
            }
            memset(mine, 0, n);
            int keep = inplace && rank == root; // the root's block stays in send
            CHECK(ndma_scatter(comm, rank == root ? send : NULL, keep ? NULL : mine, n, root));
            for (size_t i = 0; !keep && i < n; i++) {
                EXPECT(mine[i] == block(root, rank, i), "scatter root %d n %zu [%zu]", root, n, i);
            }
        }
    }
    for (int r = 0; r < size; r++) {
        for (size_t i = 0; i < n; i++) {
            send[r * n + i] = block(rank, r, i);
        }
    }
    memset(buf, 0, n * size);
    CHECK(ndma_alltoall(comm, send, buf, n));
    for (int r = 0; r < size; r++) {
        for (size_t i = 0; i < n; i++) {
            EXPECT(buf[r * n + i] == block(r, rank, i), "alltoall n %zu block from %d [%zu]", n, r, i);
        }
    }
    ndma_request_t rq;
    memset(buf, 0, n * size);
    CHECK(ndma_ialltoall(comm, send, buf, n, &rq));
    CHECK(ndma_wait(rq));
    for (int r = 0; r < size; r++) {
        EXPECT(n == 0 || buf[r * n] == block(r, rank, 0), "ialltoall n %zu block from %d", n, r);
    }
    free(send);
}

static void test_moves(ndma_comm_t comm) {
    const size_t sizes[] = {0, 1, 13, 9000, 300001};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        unsigned char *buf = malloc(n * size + 1), *mine = malloc(n + 1);
        for (int root = 0; root < size; root++) {
            for (size_t i = 0; i < n; i++) {
                buf[i] = rank == root ? (unsigned char)(i * 31 + root) : 0;
            }
            CHECK(ndma_bcast(comm, buf, n, root));
            for (size_t i = 0; i < n; i++) {
                EXPECT(buf[i] == (unsigned char)(i * 31 + root), "bcast root %d n %zu [%zu]", root, n, i);
            }
        }
        for (size_t i = 0; i < n; i++) {
            mine[i] = (unsigned char)(i + 17 * rank);
        }
        memset(buf, 0, n * size);
        CHECK(ndma_allgather(comm, mine, buf, n));
        for (int r = 0; r < size; r++) {
            for (size_t i = 0; i < n; i++) {
                EXPECT(buf[r * n + i] == (unsigned char)(i + 17 * r), "allgather n %zu block %d [%zu]", n, r, i);
            }
        }
        memset(buf, 0, n * size);
        memcpy(buf + rank * n, mine, n);
        CHECK(ndma_allgather(comm, NULL, buf, n)); // in place
        for (int r = 0; r < size; r++) {
            for (size_t i = 0; i < n; i++) {
                EXPECT(buf[r * n + i] == (unsigned char)(i + 17 * r), "allgather in place n %zu block %d [%zu]", n, r, i);
            }
        }
        test_blocks(comm, n, buf, mine);
        free(buf);
        free(mine);
    }
    CHECK(ndma_barrier(comm));
}

// test_nonblocking starts several collectives at once and completes them
// with ndma_test and ndma_wait.
static void test_nonblocking(ndma_comm_t comm) {
    enum { N = 4096 };
    static int64_t a[N], ar[N], b[N];
    static float g[N * 16];
    float mine[N];
    for (size_t i = 0; i < N; i++) {
        a[i] = value(rank, i);
        b[i] = rank == 0 ? (int64_t)i : -1;
        mine[i] = (float)(rank * 1000 + (int)(i % 1000));
    }
    ndma_request_t r1, r2, r3, r4;
    CHECK(ndma_iallreduce(comm, a, ar, N, NDMA_INT64, NDMA_SUM, &r1));
    CHECK(ndma_ibcast(comm, b, sizeof b, 0, &r2));
    CHECK(ndma_iallgather(comm, mine, g, sizeof mine, &r3));
    CHECK(ndma_ibarrier(comm, &r4));
    int done = 0;
    while (!done) {
        CHECK(ndma_test(r1, &done));
    }
    CHECK(ndma_wait(r2));
    CHECK(ndma_wait(r3));
    CHECK(ndma_wait(r4));
    for (size_t i = 0; i < N; i++) {
        EXPECT(ar[i] == expected(NDMA_SUM, i), "iallreduce [%zu]", i);
        EXPECT(b[i] == (int64_t)i, "ibcast [%zu]", i);
        for (int r = 0; r < size; r++) {
            EXPECT(g[r * N + i] == (float)(r * 1000 + (int)(i % 1000)), "iallgather block %d [%zu]", r, i);
        }
    }
    // A request completed by ndma_test is freed: waiting on it again is
    // an error, not a crash.
    EXPECT(ndma_wait(r1) == NDMA_ERR_ARG, "wait on a freed request");
}

// A notification's record: the callback completes the request itself
// (ndma_wait returns at once there) and signals the waiting thread.
struct note {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ndma_request_t req;
    int calls, rc;
    pthread_t thread;
};

static void on_note(void *arg) {
    struct note *n = arg;
    int rc = ndma_wait(n->req);
    pthread_mutex_lock(&n->mu);
    n->rc = rc;
    n->calls++;
    n->thread = pthread_self();
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

// test_notify: ndma_request_notify calls back once a request completes,
// on a thread of the library, for a request in flight and for one that
// has already completed; a second notification, a NULL function and an
// unknown request are refused.
static void test_notify(ndma_comm_t comm) {
    enum { N = 50001 };
    static float x[N], y[N];
    for (size_t i = 0; i < N; i++)
        x[i] = (float)value(rank, i);
    struct note n1 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, -1, 0};
    struct note n2 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, -1, 0};
    CHECK(ndma_iallreduce(comm, x, y, N, NDMA_FLOAT32, NDMA_SUM, &n1.req));
    CHECK(ndma_request_notify(n1.req, on_note, &n1));
    EXPECT(ndma_request_notify(n1.req, on_note, &n1) == NDMA_ERR_ARG, "a second notification of a request");
    EXPECT(ndma_request_notify(n1.req, NULL, NULL) == NDMA_ERR_ARG, "NULL notify function");
    pthread_mutex_lock(&n1.mu);
    while (n1.calls == 0)
        pthread_cond_wait(&n1.cv, &n1.mu);
    pthread_mutex_unlock(&n1.mu);
    EXPECT(n1.rc == NDMA_OK, "notified allreduce: %s", ndma_strerror(n1.rc));
    EXPECT(!pthread_equal(n1.thread, pthread_self()), "the notification ran on the caller's thread");
    for (size_t i = 0; i < N; i++)
        EXPECT((int64_t)y[i] == expected(NDMA_SUM, i), "notified allreduce [%zu]", i);
    // Completed before the notification is asked for: called at once.
    CHECK(ndma_ibarrier(comm, &n2.req));
    struct timespec pause = {0, 50000000}; // the barrier is done by then
    nanosleep(&pause, NULL);
    CHECK(ndma_request_notify(n2.req, on_note, &n2));
    pthread_mutex_lock(&n2.mu);
    while (n2.calls == 0)
        pthread_cond_wait(&n2.cv, &n2.mu);
    pthread_mutex_unlock(&n2.mu);
    EXPECT(n2.rc == NDMA_OK, "notified barrier: %s", ndma_strerror(n2.rc));
    EXPECT(ndma_request_notify(n2.req, on_note, &n2) == NDMA_ERR_ARG, "notification of a freed request");
    EXPECT(strstr(ndma_last_error(), "no request") != NULL, "freed request message: %s", ndma_last_error());
    // Each callback ran once.
    EXPECT(n1.calls == 1 && n2.calls == 1, "notifications ran %d and %d times", n1.calls, n2.calls);
}

// test_errors: every mistake is a code and a message, never a crash, and
// leaves the communicator usable.
static void test_errors(ndma_comm_t comm) {
    float x[4] = {0};
    EXPECT(ndma_allreduce(comm, x, x, 4, (ndma_dtype)99, NDMA_SUM) == NDMA_ERR_ARG, "bad dtype");
    EXPECT(strstr(ndma_last_error(), "data type") != NULL, "bad dtype message: %s", ndma_last_error());
    EXPECT(ndma_allreduce(comm, x, x, 4, NDMA_FLOAT32, (ndma_op)0) == NDMA_ERR_ARG, "bad op");
    EXPECT(ndma_bcast(comm, x, sizeof x, size) == NDMA_ERR_ARG, "bad root");
    EXPECT(ndma_bcast(comm, NULL, 8, 0) == NDMA_ERR_ARG, "NULL buffer");
    EXPECT(ndma_barrier(comm + 1000) == NDMA_ERR_ARG, "bad communicator");
    EXPECT(strstr(ndma_last_error(), "no communicator") != NULL, "bad communicator message: %s", ndma_last_error());
    EXPECT(ndma_wait(12345678) == NDMA_ERR_ARG, "bad request");
    EXPECT(ndma_comm_rank(comm, NULL) == NDMA_ERR_ARG, "NULL rank");
    EXPECT(ndma_comm_local_size(comm, NULL) == NDMA_ERR_ARG, "NULL local size");
    EXPECT(ndma_comm_create(NULL, NULL) == NDMA_ERR_ARG, "NULL config");
    ndma_config cfg;
    memset(&cfg, 0, sizeof cfg);
    ndma_comm_t other;
    EXPECT(ndma_comm_create(&cfg, &other) == NDMA_ERR_ARG, "uninitialized config");
    ndma_config_init(&cfg);
    EXPECT(ndma_comm_create(&cfg, &other) == NDMA_ERR_ARG, "config without rank");
    // Neither a credential nor insecure: refused before anything is sent.
    char job[32];
    snprintf(job, sizeof job, "plain-%d", rank);
    cfg.rank = 0;
    cfg.size = 1;
    cfg.switch_addr = getenv("NDMA_SWITCH");
    cfg.token = getenv("NDMA_TOKEN");
    cfg.job = job;
    EXPECT(ndma_comm_create(&cfg, &other) == NDMA_ERR_ARG, "neither a credential nor insecure");
    EXPECT(strstr(ndma_last_error(), "ndma_config.credential") != NULL, "no credential message: %s", ndma_last_error());
    // This switch seals every datagram: an insecure process gets no
    // answer, and is told why.
    cfg.insecure = 1;
    cfg.join_timeout_ms = 1500;
    EXPECT(ndma_comm_create(&cfg, &other) == NDMA_ERR_AUTH, "insecure at a sealing switch");
    EXPECT(strstr(ndma_last_error(), "takes only sealed datagrams") != NULL, "insecure at a sealing switch message: %s", ndma_last_error());
    cfg.insecure = 0;
    cfg.join_timeout_ms = 0;
    cfg.hierarchy = 7;
    EXPECT(ndma_comm_create(&cfg, &other) == NDMA_ERR_ARG, "hierarchy 7");
    EXPECT(strstr(ndma_last_error(), "hierarchy 7") != NULL, "hierarchy 7 message: %s", ndma_last_error());
    cfg.hierarchy = 0;
    EXPECT(ndma_comm_set_algo(comm, "bcast", "ring") == NDMA_ERR_ARG, "bcast ring");
    EXPECT(strstr(ndma_last_error(), "no ring algorithm") != NULL, "bcast ring message: %s", ndma_last_error());
    EXPECT(ndma_comm_set_algo(comm, "sort", "ring") == NDMA_ERR_ARG, "unknown operation");
    EXPECT(ndma_comm_set_algo(comm, "allreduce", "fastest") == NDMA_ERR_ARG, "unknown algorithm");
    EXPECT(ndma_comm_set_timeout(comm, -1) == NDMA_ERR_ARG, "negative timeout");
    EXPECT(strcmp(ndma_strerror(NDMA_ERR_RANK), "a rank failed") == 0, "strerror");
    EXPECT(strcmp(ndma_strerror(-5), "unknown error code") == 0, "strerror of a bad code");
    // This switch has no memory nodes: a region fails on every rank.
    ndma_region_t reg = 0;
    EXPECT(ndma_region_alloc(comm, 4096, 0, &reg) == NDMA_ERR_POOL, "region without memory nodes");
    EXPECT(strstr(ndma_last_error(), "memory nodes") != NULL, "region message: %s", ndma_last_error());
    EXPECT(ndma_region_alloc(comm, 4096, 3, &reg) == NDMA_ERR_ARG, "stripe not a multiple of 8");
    EXPECT(ndma_region_read(reg, 0, x, sizeof x) == NDMA_ERR_ARG, "read of no region");
    ndma_optim o;
    ndma_optim_init(&o);
    EXPECT(o.algo == NDMA_OPTIM_ADAM && o.step == 1 && o.struct_size == sizeof o, "ndma_optim_init");
    EXPECT(ndma_region_optim_step(reg, 0, 4096, &o, x, 4) == NDMA_ERR_ARG, "optimizer step on no region");
    EXPECT(strcmp(ndma_strerror(NDMA_ERR_POOL), "memory pool has no room or lost the data") == 0, "strerror pool");
    // Still usable.
    x[0] = 1;
    CHECK(ndma_allreduce(comm, x, x, 1, NDMA_FLOAT32, NDMA_SUM));
    EXPECT(x[0] == (float)size, "allreduce after errors: %g", x[0]);
}

// A thread that calls the library while the main thread runs collectives:
// handles and last-error messages are safe across threads.
static volatile int stop;
static ndma_comm_t shared;

static void *poker(void *arg) {
    (void)arg;
    long calls = 0;
    while (!stop) {
        int r = -1;
        if (ndma_comm_rank(shared, &r) != NDMA_OK || r != rank) {
            fprintf(stderr, "rank %d: ndma_comm_rank from another thread gave %d\n", rank, r);
            exit(1);
        }
        if (ndma_wait(999999999) != NDMA_ERR_ARG || strstr(ndma_last_error(), "no request") == NULL) {
            fprintf(stderr, "rank %d: another thread's error: %s\n", rank, ndma_last_error());
            exit(1);
        }
        calls++;
    }
    return (void *)calls;
}

// env_config fills cfg for rank r of job at the switch of the
// environment, as ndma_comm_from_env would find it.
static void env_config(ndma_config *cfg, int r, const char *job) {
    ndma_config_init(cfg);
    cfg->rank = r;
    cfg->size = size;
    // NDMA_SWITCHES, when set, is the list to shard over: the config
    // takes it as a comma-separated switch_addr.
    cfg->switch_addr = getenv("NDMA_SWITCHES") ? getenv("NDMA_SWITCHES") : getenv("NDMA_SWITCH");
    cfg->token = getenv("NDMA_TOKEN");
    cfg->insecure = cfg->token == NULL;
    cfg->credential = getenv("NDMA_CREDENTIAL");
    cfg->job = job;
    const char *h = getenv("NDMA_HIERARCHY");
    if (h != NULL && strcmp(h, "auto") == 0) {
        cfg->hierarchy = NDMA_HIERARCHY_AUTO;
    } else if (h != NULL && strcmp(h, "off") == 0) {
        cfg->hierarchy = NDMA_HIERARCHY_OFF;
    }
    cfg->host_id = getenv("NDMA_HOST_ID");
}

// check_local: with NDMA_TEST_LOCAL_SIZE set, the communicator runs its
// collectives through shared memory with that many ranks of this host.
static void check_local(ndma_comm_t comm, const char *what) {
    const char *want = getenv("NDMA_TEST_LOCAL_SIZE");
    if (want == NULL) {
        return;
    }
    int n = 0;
    CHECK(ndma_comm_local_size(comm, &n));
    EXPECT(n == atoi(want), "%s: %d ranks on this host share memory, want %s", what, n, want);
}

static ndma_comm_t blocked_comm;

static void *block_in_barrier(void *arg) {
    (void)arg;
    return (void *)(long)ndma_barrier(blocked_comm);
}

int main(void) {
    EXPECT(ndma_abi_version() == NDMA_ABI_VERSION, "ABI %d, header %d", ndma_abi_version(), NDMA_ABI_VERSION);
    ndma_comm_t comm;
    CHECK(ndma_comm_from_env(&comm));
    CHECK(ndma_comm_rank(comm, &rank));
    CHECK(ndma_comm_size(comm, &size));
    EXPECT(rank == atoi(getenv("NDMA_RANK")) && size == atoi(getenv("NDMA_SIZE")), "rank %d size %d", rank, size);
    check_local(comm, "from the environment");

    shared = comm;
    pthread_t th;
    pthread_create(&th, NULL, poker, NULL);
    test_reductions(comm);
    test_moves(comm);
    // The host algorithms, chosen through the API.
    CHECK(ndma_comm_set_algo(comm, "allreduce", "ring"));
    CHECK(ndma_comm_set_algo(comm, "reduce", "binomial"));
    CHECK(ndma_comm_set_algo(comm, "reducescatter", "direct"));
    CHECK(ndma_comm_set_algo(comm, "bcast", "chain"));
    CHECK(ndma_comm_set_algo(comm, "allgather", "recursive_doubling"));
    CHECK(ndma_comm_set_algo(comm, "barrier", "recursive_doubling"));
    test_reductions(comm);
    test_moves(comm);
    for (size_t i = 0; i < 6; i++) {
        static const char *const all[] = {"allreduce", "reduce", "reducescatter", "bcast", "allgather", "barrier"};
        CHECK(ndma_comm_set_algo(comm, all[i], i % 2 ? NULL : "auto"));
    }
    CHECK(ndma_comm_set_deterministic(comm, 1));
    CHECK(ndma_comm_set_timeout(comm, 60000));
    test_nonblocking(comm);
    test_notify(comm);
    test_errors(comm);
    stop = 1;
    void *calls;
    pthread_join(th, &calls);
    EXPECT((long)calls > 0, "the other thread made no call");

    // A second communicator, from an explicit config, beside the first.
    ndma_config cfg;
    // Its job is one of the first job's own groups (JOB.SUFFIX), which a
    // credential of the first job's scope may join.
    char job[128];
    snprintf(job, sizeof job, "%s.explicit", getenv("NDMA_JOB"));
    env_config(&cfg, (rank + 1) % size, job); // ranks renumbered
    cfg.timeout_ms = 30000;
    ndma_comm_t second;
    CHECK(ndma_comm_create(&cfg, &second));
    int r2;
    CHECK(ndma_comm_rank(second, &r2));
    EXPECT(r2 == (rank + 1) % size, "second communicator rank %d", r2);
    check_local(second, "from ndma_config");
    int64_t v = r2, sum = 0;
    CHECK(ndma_allreduce(second, &v, &sum, 1, NDMA_INT64, NDMA_SUM));
    EXPECT(sum == (int64_t)size * (size - 1) / 2, "second communicator sum %lld", (long long)sum);
    CHECK(ndma_comm_free(second));

    // Freeing a communicator while another thread is blocked in a call
    // on it: the call returns NDMA_ERR_CLOSED, and the free returns once
    // the call no longer runs. Rank 0 blocks in a barrier the others
    // never enter; they free their communicators later.
    snprintf(job, sizeof job, "%s.freed", getenv("NDMA_JOB"));
    env_config(&cfg, rank, job);
    ndma_comm_t third;
    CHECK(ndma_comm_create(&cfg, &third));
    if (rank == 0) {
        pthread_t blocked;
        blocked_comm = third;
        pthread_create(&blocked, NULL, block_in_barrier, NULL);
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
        CHECK(ndma_comm_free(third));
        void *rc;
        pthread_join(blocked, &rc);
        EXPECT((long)rc == NDMA_ERR_CLOSED, "a barrier blocked during ndma_comm_free returned %ld (%s)", (long)rc,
               ndma_strerror((int)(long)rc));
    } else {
        struct timespec ts = {1, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
        ndma_comm_free(third); // rank 0 left without the barrier: any result
    }

    CHECK(ndma_barrier(comm));
    CHECK(ndma_comm_free(comm));
    EXPECT(ndma_barrier(comm) == NDMA_ERR_ARG, "barrier after free");
    EXPECT(ndma_comm_free(comm) == NDMA_ERR_ARG, "second free");
    printf("ok\n");
    return 0;
}
