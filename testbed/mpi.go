package testbed

// MPIConfig describes one Open MPI job on a testbed: a rank per host.
type MPIConfig struct {
	// MPIRun is Open MPI's mpirun (default: mpirun on PATH).
	MPIRun string
	// NDMALib, when set, is NDMA's MPI interposition library
	// (libndma_mpi.so), preloaded into every rank with the launch
	// environment it needs: NDMA_SWITCH, NDMA_MTU, NDMA_TOKEN, NDMA_JOB
	// (Job, or PREFIX-mpi-RANDOM) and, on a testbed with credentials,
	// each rank's own (JOB/RANK).
	NDMALib string
	Job     string
	// MPIArgs go to mpirun before the program (--mca settings, -x VAR).
	MPIArgs []string
	// Env is added to mpirun's environment (and, through -x, the
	// ranks' where MPIArgs says so).
	Env []string
	// Program is the program and its arguments.
	Program []string
}
