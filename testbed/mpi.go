package testbed

// MPIConfig describes one Open MPI job on a testbed: a rank per host, or
// PerHost.
type MPIConfig struct {
	// PerHost is the number of ranks on each host, 1 to MaxPerHost; 0
	// means 1. With more than one, the ranks of a host reach each other
	// through Open MPI's shared memory (btl vader) and NDMA's library
	// finds each rank's credential (JOB/RANK) in a directory.
	PerHost int
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
