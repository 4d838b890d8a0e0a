// Package fidelity judges whether a job on the testbed measured the
// network or the machine it shares: every host of a testbed is a set of
// processes on the same few cores, so when the ranks, the switch and the
// links' kernel work outgrow those cores, a figure says which process got
// a CPU when, not what the links carry. Following the monitors network
// emulators use to reject unfaithful runs, a Monitor samples, over one
// job, the machine's CPU time from /proc/stat (softirq time, the links'
// work, and the time the hypervisor stole included), the CPU time of every
// process of the testbed from /proc/PID/stat, the runnable tasks, and the
// bytes each link carried (the switch ports' counters in each bridge
// namespace's net/dev, and every link's tbf statistics from tc). A daemon
// killed during the job counts until it exited, and a process started in
// its place (its namespace, its command line) from then on.
//
// The arithmetic is separate from the reading: a Recorder takes the text
// of those files as recorded and Judge turns it into a Verdict, so tests
// feed it recorded samples. The rule (Rule) is:
//
//   - CPU: the testbed's CPU — its processes' user+system time plus the
//     machine's softirq time — over the CPU the machine had (every CPU for
//     the job's wall time, less stolen time) must be at most
//     Rule.MaxCPUShare (60% by default). Otherwise the job is CPU-bound.
//   - Link: the bottleneck link is the link direction whose bytes over the
//     job take longest at its rate. When those bytes fill at least
//     Rule.MinTransfer of line-rate time (a bulk job), the link must be
//     busy at least Rule.MinBusy (90%) of its transfer: over the sampling
//     intervals in which it carried at least Rule.ActiveShare (5%) of its
//     rate, the bytes it carried over what its rate allowed. A shorter,
//     latency-bound job is not judged on its link. A bulk job whose
//     bottleneck idles while the CPU rule holds is "link-idle": the cause
//     may be the CPU (other tenants, run-queue waits) or the protocol.
//   - Daemons: a daemon of the testbed with no process at the end of the
//     job makes it "daemon-missing", whatever the CPU and links show.
//
// The package sits above testbed (TargetOf reads its State) and below
// bench and the ndma CLI, which run the monitor around each job.
package fidelity
