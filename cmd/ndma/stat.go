package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ndma/ndma/endpoint"
)

// statNode is one memory node's line of ndma stat.
type statNode struct {
	ID       uint16  `json:"id"`
	Name     string  `json:"name,omitempty"` // its credential's name (sealed fabrics)
	Addr     string  `json:"addr"`
	Alive    bool    `json:"alive"`
	Capacity uint64  `json:"capacity"`
	Used     uint64  `json:"used"`
	Share    float64 `json:"share"`          // of all used bytes
	ReqPerS  float64 `json:"requests_per_s"` // forwarded to it over the interval
	BytesPS  float64 `json:"bytes_per_s"`    // their payload
	Requests uint64  `json:"requests_total"` // since the switch started
	Bytes    uint64  `json:"request_bytes_total"`
}

// statReport is ndma stat's output.
type statReport struct {
	Interval   float64    `json:"interval_s"`
	Nodes      []statNode `json:"nodes"`
	Alive      int        `json:"alive"`
	Regions    int        `json:"regions"`
	Capacity   uint64     `json:"capacity"`
	Used       uint64     `json:"used"`
	Balance    float64    `json:"balance"` // most used live node over the mean (1 = even)
	ReqPerS    float64    `json:"requests_per_s"`
	BytesPS    float64    `json:"bytes_per_s"`
	RefusedPS  float64    `json:"refused_per_s"`
	Refused    uint64     `json:"refused_total"`
	LoadSpread float64    `json:"load_balance"` // busiest live node's requests over the mean, over the interval
}

func newStatCmd() *cobra.Command {
	var pf poolFlags
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "stat",
		Short: "The memory pool at a glance: capacity and use per node, stripe balance, requests/s, refusals",
		Long: `stat asks the forwarding node (--switch) for its memory pool twice,
--interval apart, and prints per memory node its capacity, use, share of
the pool's used memory and the requests per second the switch forwarded
to it, with the totals: stripe balance (the most used live node over the
mean, 1.00 is even), load balance (the busiest node's requests over the
mean), and requests the switch refused per second (bad keys, bounds,
permissions, dead nodes). --interval 0 takes one sample: no rates.
Give it a client (or member) credential (--credential or
$NDMA_CREDENTIAL), as to the pool commands, or --insecure.`,
		Example: `  ndma stat --switch localhost:7471 --token-file fab/token --credential fab/client-0.cred
  NDMA_SWITCH=localhost:7471 NDMA_TOKEN=$(cat fab/token) NDMA_CREDENTIAL=fab/client-0.cred ndma stat --interval 5s --json
  # in a testbed, in its host namespace (the switch's 10.77.0.1 exists only there):
  sudo ip netns exec ndmatb-h0 ndma stat --switch 10.77.0.1:7471 --token-file /run/ndma-testbed/ndmatb/token \
    --credential /run/ndma-testbed/ndmatb/client.cred`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 0 {
				return fmt.Errorf("--interval %v: want 0 or a positive duration", interval)
			}
			ep, opts, ctx, cancel, err := pf.client(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer ep.Close()
			first, err := ep.PoolStat(ctx, pf.sw, opts)
			if err != nil {
				return err
			}
			second := first
			if interval > 0 {
				select {
				case <-time.After(interval):
				case <-cmdContext(cmd).Done():
					return cmdContext(cmd).Err()
				}
				sctx, scancel := contextTimeout(cmd, pf.timeout)
				second, err = ep.PoolStat(sctx, pf.sw, opts)
				scancel()
				if err != nil {
					return err
				}
			}
			rep := makeStatReport(first, second, interval)
			if pf.json {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			}
			return printStat(cmd.OutOrStdout(), rep)
		},
	}
	pf.register(cmd)
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between the two samples the rates come from (0: one sample, no rates)")
	pf.hintCredential(cmd)
	return cmd
}

func init() { rootCmd.AddCommand(newStatCmd()) }

// makeStatReport compares two samples of the pool taken d apart.
func makeStatReport(a, b endpoint.PoolState, d time.Duration) statReport {
	rep := statReport{Interval: d.Seconds(), Regions: len(b.Regions), Refused: b.Refused}
	before := make(map[uint16][2]uint64)
	for _, n := range a.Nodes {
		before[n.ID] = [2]uint64{n.Requests, n.Bytes}
	}
	var liveUsed, liveReq float64
	var maxUsed, maxReq float64
	for _, n := range b.Nodes {
		s := statNode{ID: n.ID, Name: n.Name, Addr: n.Addr.String(), Alive: n.Alive, Capacity: n.Capacity, Used: n.Used, Requests: n.Requests, Bytes: n.Bytes}
		if d > 0 {
			p := before[n.ID]
			s.ReqPerS = float64(n.Requests-min(p[0], n.Requests)) / d.Seconds()
			s.BytesPS = float64(n.Bytes-min(p[1], n.Bytes)) / d.Seconds()
		}
		rep.Capacity += n.Capacity
		rep.Used += n.Used
		rep.ReqPerS += s.ReqPerS
		rep.BytesPS += s.BytesPS
		if n.Alive {
			rep.Alive++
			liveUsed += float64(n.Used)
			liveReq += s.ReqPerS
			maxUsed = max(maxUsed, float64(n.Used))
			maxReq = max(maxReq, s.ReqPerS)
		}
		rep.Nodes = append(rep.Nodes, s)
	}
	for i := range rep.Nodes {
		if rep.Used > 0 {
			rep.Nodes[i].Share = float64(rep.Nodes[i].Used) / float64(rep.Used)
		}
	}
	if liveUsed > 0 {
		rep.Balance = maxUsed / (liveUsed / float64(rep.Alive))
	}
	if liveReq > 0 {
		rep.LoadSpread = maxReq / (liveReq / float64(rep.Alive))
	}
	if d > 0 {
		rep.RefusedPS = float64(b.Refused-min(a.Refused, b.Refused)) / d.Seconds()
	}
	return rep
}

func printStat(w io.Writer, r statReport) error {
	fmt.Fprintf(w, "pool     %d memory nodes (%d alive), %d regions, %s of %s used (%.1f%%)\n",
		len(r.Nodes), r.Alive, r.Regions, sizeString(r.Used), sizeString(r.Capacity), pct(r.Used, r.Capacity))
	fmt.Fprintf(w, "balance  stripes %.2f (most used live node / mean; 1.00 is even)", r.Balance)
	if r.Interval > 0 {
		fmt.Fprintf(w, ", load %.2f", r.LoadSpread)
	}
	fmt.Fprintln(w)
	if r.Interval > 0 {
		fmt.Fprintf(w, "traffic  %.0f requests/s, %.2f MB/s of request payload, %.1f refused/s (over %gs)\n",
			r.ReqPerS, r.BytesPS/1e6, r.RefusedPS, r.Interval)
	}
	fmt.Fprintf(w, "errors   %d requests refused by the switch since it started\n\n", r.Refused)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAME\tADDRESS\tALIVE\tCAPACITY\tUSED\tUSE\tSHARE\tREQ/S\tMB/S\tREQUESTS")
	for _, n := range r.Nodes {
		name := n.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s\t%s\t%.1f%%\t%.1f%%\t%.0f\t%.2f\t%d\n", n.ID, name, n.Addr, n.Alive, sizeString(n.Capacity),
			sizeString(n.Used), pct(n.Used, n.Capacity), 100*n.Share, n.ReqPerS, n.BytesPS/1e6, n.Requests)
	}
	return tw.Flush()
}

// contextTimeout bounds the command's context by d.
func contextTimeout(cmd *cobra.Command, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmdContext(cmd), d)
}
