package coll

import (
	"errors"
	"strings"
	"testing"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
)

// envVars is every variable ParseEnv reads, in the order FuzzParseEnv
// gives them values.
var envVars = [...]string{
	"NDMA_RANK", "NDMA_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
	"PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE",
	"NDMA_SWITCH", "NDMA_TOKEN", CredentialEnv, InsecureEnv, "NDMA_MTU",
	"NDMA_JOIN_TIMEOUT", "NDMA_LIVENESS", "NDMA_BUSY_POLL", "NDMA_JOB",
	"SLURM_JOB_ID", "OMPI_MCA_orte_ess_jobid", "TORCHELASTIC_RUN_ID",
}

// FuzzParseEnv runs ParseEnv on any environment: set is which of
// envVars are set (bit i for envVars[i]), vals their values, separated by
// NUL bytes. ParseEnv must not panic; an error wraps ErrArg and names the
// variable at fault; a launch it accepts is consistent (a rank within
// the size, a job name, every bound within its range).
func FuzzParseEnv(f *testing.F) {
	seeds := []map[string]string{
		{"NDMA_RANK": "2", "NDMA_SIZE": "4", "NDMA_SWITCH": "10.0.0.1:7471", "NDMA_JOB": "j", "NDMA_TOKEN": "t", InsecureEnv: "1"},
		{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_MCA_orte_ess_jobid": "77", "NDMA_MTU": "8972"},
		{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "123", "NDMA_LIVENESS": "off", "NDMA_JOIN_TIMEOUT": "90s"},
		{"RANK": "2", "WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "abc", "NDMA_BUSY_POLL": "50us", CredentialEnv: "/etc/ndma/cred"},
		{"PMI_RANK": "-1", "PMI_SIZE": "2", InsecureEnv: "maybe"},
		{"NDMA_RANK": "0", "NDMA_SIZE": "1", "NDMA_MTU": "65508", "NDMA_LIVENESS": "-1s"},
		{},
	}
	for _, env := range seeds {
		var set uint32
		vals := make([]string, len(envVars))
		for i, k := range envVars {
			if v, ok := env[k]; ok {
				set |= 1 << i
				vals[i] = v
			}
		}
		f.Add(set, strings.Join(vals, "\x00"))
	}
	f.Fuzz(func(t *testing.T, set uint32, vals string) {
		parts := strings.Split(vals, "\x00")
		env := map[string]string{}
		for i, k := range envVars {
			if set&(1<<i) != 0 {
				if i < len(parts) {
					env[k] = parts[i]
				} else {
					env[k] = ""
				}
			}
		}
		l, err := ParseEnv(envOf(env))
		if err != nil {
			if !errors.Is(err, ErrArg) {
				t.Fatalf("%v: error %v does not wrap ErrArg", env, err)
			}
			named := false
			for _, k := range envVars {
				named = named || strings.Contains(err.Error(), k)
			}
			if !named {
				t.Fatalf("%v: error %q names no variable", env, err)
			}
			return
		}
		if l.Size < 1 || l.Rank < 0 || l.Rank >= l.Size || l.Source == "" || l.Job == "" ||
			l.MTU != 0 && (l.MTU < transport.MinMTU || l.MTU > transport.MaxMTU) ||
			l.JoinTimeout < 0 || l.Liveness < -1 || l.BusyPoll < 0 || l.BusyPoll > netio.MaxBusyPoll {
			t.Fatalf("%v: accepted an inconsistent launch %+v", env, l)
		}
	})
}
