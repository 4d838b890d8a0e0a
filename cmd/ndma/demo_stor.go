package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/stor"
)

// The storage part of the demo: storage nodes on loopback, a volume of
// demoVolReplicas copies, written by one member with multicasts and read
// back by anycast.
const (
	demoVolNodes    = 3
	demoVolReplicas = 3
	demoVolSize     = 8 << 20
	demoVolExtent   = 1 << 20
)

// storage starts the storage nodes and runs the volume row.
func (f *fabricDemo) storage() demoRow {
	row := demoRow{Op: "volume write+read", Size: demoVolSize}
	fail := func(err error) demoRow {
		row.Detail = err.Error()
		return row
	}
	dir, err := os.MkdirTemp("", "ndma-demo-stor-")
	if err != nil {
		return fail(err)
	}
	*f.closers = append(*f.closers, func() { os.RemoveAll(dir) })
	for i := range demoVolNodes {
		opts, err := f.sec.endpoint(secure.RoleMember, fmt.Sprintf("%s/node%d", stor.DefaultService, i))
		if err != nil {
			return fail(err)
		}
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, opts)
		if err != nil {
			return fail(err)
		}
		*f.closers = append(*f.closers, func() { ep.Close() })
		f.sec.watch(ep.SecurityStats)
		n, err := stor.NewNode(ep, stor.NodeConfig{Dir: fmt.Sprintf("%s/%d", dir, i), ID: i, Switch: f.sw, Fabric: f.opts})
		if err != nil {
			return fail(err)
		}
		if err := n.Start(f.ctx); err != nil {
			return fail(err)
		}
		*f.closers = append(*f.closers, n.Close)
	}
	ep := f.eps[0]
	c := stor.NewClient(ep, f.sw, stor.ClientOptions{Fabric: f.opts})
	d, err := c.Create(f.ctx, stor.VolumeSpec{Name: "demo", Size: demoVolSize, Extent: demoVolExtent, Replicas: demoVolReplicas})
	if err != nil {
		return fail(err)
	}
	v, err := c.Open(f.ctx, d.Name, stor.OpenOptions{Write: true})
	if err != nil {
		return fail(err)
	}
	data := make([]byte, demoVolSize)
	rand.Read(data)
	before := sent(ep)
	start := time.Now()
	if _, err := v.WriteAt(data, 0); err != nil {
		v.Close()
		return fail(err)
	}
	if err := v.Flush(); err != nil {
		v.Close()
		return fail(err)
	}
	took := time.Since(start)
	out := sent(ep) - before
	if err := v.Close(); err != nil {
		return fail(err)
	}
	// Another member reads it back, each MiB from one replica.
	r, err := stor.NewClient(f.eps[1], f.sw, stor.ClientOptions{Fabric: f.opts}).Open(f.ctx, d.Name, stor.OpenOptions{})
	if err != nil {
		return fail(err)
	}
	got := make([]byte, demoVolSize)
	if _, err := r.ReadAt(got, 0); err != nil {
		return fail(err)
	}
	if i := firstDiff(got, data); i >= 0 {
		return fail(fmt.Errorf("byte %d read back differs", i))
	}
	if _, err := c.Remove(f.ctx, d.Name, false); err != nil {
		return fail(err)
	}
	row.OK = true
	row.Detail = fmt.Sprintf("%s on %d storage nodes, %d copies, flushed and read back by another member; the writer sent %s for the %d copies",
		formatMiB(demoVolSize), demoVolNodes, demoVolReplicas, formatMiB(out), demoVolReplicas)
	row.Gbps = float64(demoVolSize) * 8 / took.Seconds() / 1e9
	return row
}
