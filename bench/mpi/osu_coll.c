/*
 * osu_coll: OSU-style latency of one MPI collective, the MPI side of
 * `ndma bench suite --mpi`. It measures what `ndma bench coll` measures,
 * the same way: WARMUP unmeasured calls, then ITERS calls with a barrier
 * before each, every rank timing its own calls; rank 0 prints one JSON row
 * with the average, minimum and maximum over ranks of the per-rank
 * averages (the keys of `ndma bench coll --json`, algo "mpi"). The last
 * call's result is checked for bcast, reduce, allreduce and allgather.
 *
 * Usage: osu_coll OP SIZE ITERS WARMUP [LABEL]
 *   OP: barrier bcast reduce allreduce allgather reducescatter gather
 *       scatter alltoall. SIZE: bytes per rank (reductions use float32
 *       sum over SIZE/4 elements, as ndma bench coll does). LABEL: the
 *       row's algo (default "mpi"), naming how the job was run (an
 *       algorithm forced by MCA parameters, a preloaded library).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* wall_ns is the wall clock in Unix nanoseconds: the fidelity monitor
 * judges the window between the first and the last timed call. */
static long long wall_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int run(const char *op, int n, int size, char *send, char *recv) {
	int f32 = size / 4;
	if (!strcmp(op, "barrier"))
		return MPI_Barrier(MPI_COMM_WORLD);
	if (!strcmp(op, "bcast"))
		return MPI_Bcast(send, size, MPI_BYTE, 0, MPI_COMM_WORLD);
	if (!strcmp(op, "reduce"))
		return MPI_Reduce(send, recv, f32, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
	if (!strcmp(op, "allreduce"))
		return MPI_Allreduce(send, recv, f32, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	if (!strcmp(op, "allgather"))
		return MPI_Allgather(send, size, MPI_BYTE, recv, size, MPI_BYTE, MPI_COMM_WORLD);
	if (!strcmp(op, "reducescatter"))
		return MPI_Reduce_scatter_block(send, recv, f32, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	if (!strcmp(op, "gather"))
		return MPI_Gather(send, size, MPI_BYTE, recv, size, MPI_BYTE, 0, MPI_COMM_WORLD);
	if (!strcmp(op, "scatter"))
		return MPI_Scatter(send, size, MPI_BYTE, recv, size, MPI_BYTE, 0, MPI_COMM_WORLD);
	if (!strcmp(op, "alltoall"))
		return MPI_Alltoall(send, size, MPI_BYTE, recv, size, MPI_BYTE, MPI_COMM_WORLD);
	return -1;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc != 5 && argc != 6) {
		if (rank == 0)
			fprintf(stderr, "usage: osu_coll OP SIZE ITERS WARMUP [LABEL]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	const char *op = argv[1], *label = argc == 6 ? argv[5] : "mpi";
	long size = atol(argv[2]), iters = atol(argv[3]), warmup = atol(argv[4]);
	if (size < 0 || size > (1L << 30) / n || iters < 1 || warmup < 0) {
		if (rank == 0)
			fprintf(stderr, "osu_coll: bad SIZE %ld, ITERS %ld or WARMUP %ld\n", size, iters, warmup);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	size_t bytes = (size_t)size * n + 8; /* room for the n-block ops */
	char *send = malloc(bytes), *recv = malloc(bytes);
	if (!send || !recv) {
		fprintf(stderr, "osu_coll: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	/* Reductions sum float 1.0s; data movement carries rank+1 bytes. */
	int reduction = !strcmp(op, "reduce") || !strcmp(op, "allreduce") || !strcmp(op, "reducescatter");
	if (reduction) {
		for (size_t k = 0; k < bytes / 4; k++)
			((float *)send)[k] = 1.0f;
	} else {
		memset(send, rank + 1, bytes);
	}
	memset(recv, 0, bytes);
	double total = 0;
	long long from_ns = 0, to_ns = 0; /* the timed calls, wall clock */
	for (long i = 0; i < warmup + iters; i++) {
		if (i == warmup)
			from_ns = wall_ns();
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		int err = run(op, n, (int)size, send, recv);
		double d = MPI_Wtime() - t0;
		if (err != MPI_SUCCESS) {
			if (rank == 0)
				fprintf(stderr, "osu_coll: %s: %s\n", op, err < 0 ? "unknown operation" : "MPI error");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		if (i >= warmup)
			total += d;
	}
	to_ns = wall_ns();
	/* Check the last call's result where it is simple to. */
	int bad = 0;
	long f32 = size / 4;
	if (!strcmp(op, "bcast")) {
		for (long k = 0; k < size; k++)
			bad |= send[k] != 1;
	} else if (!strcmp(op, "allreduce") || (!strcmp(op, "reduce") && rank == 0)) {
		for (long k = 0; k < f32; k++)
			bad |= ((float *)recv)[k] != (float)n;
	} else if (!strcmp(op, "allgather")) {
		for (long k = 0; k < size * n; k++)
			bad |= recv[k] != (char)(k / size + 1);
	}
	if (bad) {
		fprintf(stderr, "osu_coll: rank %d: %s of %ld bytes: wrong result\n", rank, op, size);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	double avg = total / iters * 1e6, sum, lo, hi;
	MPI_Reduce(&avg, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&avg, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
	MPI_Reduce(&avg, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		if (!strcmp(op, "barrier"))
			size = 0;
		printf("{\"op\":\"%s\",\"algo\":\"%s\",\"ranks\":%d,\"size\":%ld,\"avg_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"iters\":%ld,"
		       "\"timed_from_ns\":%lld,\"timed_to_ns\":%lld}\n",
		       op, label, n, size, sum / n, lo, hi, iters, from_ns, to_ns);
		fflush(stdout);
	}
	free(send);
	free(recv);
	MPI_Finalize();
	return 0;
}
