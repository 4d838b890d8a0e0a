/*
 * allreduce: times a float32 sum Allreduce through libndma from C, one
 * rank per process, as a launcher starts them (ndma testbed run, mpirun,
 * NDMA_RANK/NDMA_SIZE...). Rank 0 prints the average over ITERS calls,
 * each after a barrier, following 2 unmeasured ones, and every rank
 * checks the last result.
 *
 *   make libndma
 *   cc -O2 -Ibuild/include -o /tmp/allreduce examples/c/allreduce.c -Lbuild -lndma -Wl,-rpath,$PWD/build
 *   sudo ndma testbed run -- /tmp/allreduce 16777216 6
 */
#include <ndma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3 || atol(argv[1]) < 4 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: allreduce BYTES ITERS (BYTES >= 4, ITERS >= 1)\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) / 4;
    int iters = atoi(argv[2]);
    ndma_comm_t c;
    if (ndma_comm_from_env(&c) != NDMA_OK) {
        fprintf(stderr, "allreduce: %s\n", ndma_last_error());
        return 1;
    }
    int rank, size;
    ndma_comm_rank(c, &rank);
    ndma_comm_size(c, &size);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    if (x == NULL || y == NULL) {
        fprintf(stderr, "allreduce: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        x[i] = 1;
    memset(y, 0, n * sizeof *y);
    double total = 0;
    for (int i = 0; i < iters + 2; i++) {
        int rc = ndma_barrier(c);
        double t0 = now();
        if (rc == NDMA_OK)
            rc = ndma_allreduce(c, x, y, n, NDMA_FLOAT32, NDMA_SUM);
        if (rc != NDMA_OK) {
            fprintf(stderr, "allreduce: rank %d: %s: %s\n", rank, ndma_strerror(rc), ndma_last_error());
            return 1;
        }
        if (i >= 2)
            total += now() - t0;
    }
    for (size_t i = 0; i < n; i++) {
        if (y[i] != (float)size) {
            fprintf(stderr, "allreduce: rank %d: element %zu is %g, want %d\n", rank, i, y[i], size);
            return 1;
        }
    }
    if (rank == 0)
        printf("allreduce %zu bytes, %d ranks: %.6f s per call (%d calls)\n", n * 4, size, total / iters, iters);
    ndma_comm_free(c);
    free(x);
    free(y);
    return 0;
}
