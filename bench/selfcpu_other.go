//go:build !unix

package bench

import "time"

// rusageCPU is zero where getrusage is missing: rows then report no CPU.
func rusageCPU() time.Duration { return 0 }
