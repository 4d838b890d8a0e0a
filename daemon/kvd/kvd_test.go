package kvd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/daemon/switchd"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/daemon/daemontest"
	"github.com/ndma/ndma/internal/secretfile"
	"github.com/ndma/ndma/kv"
	"github.com/ndma/ndma/pool"
)

func goodConfig() Config {
	return Config{Listen: "127.0.0.1:0", Switch: "127.0.0.1:7471", Insecure: true, Space: "cache", Region: 1, RegionKey: 0x1234}
}

// TestConfigInvalid names the field of every invalid value.
func TestConfigInvalid(t *testing.T) {
	for _, c := range []struct {
		field string
		mod   func(*Config)
	}{
		{"Listen", func(c *Config) { c.Listen = "nope" }},
		{"Switch", func(c *Config) { c.Switch = "" }},
		{"Token", func(c *Config) { c.Insecure = false }},
		{"Token", func(c *Config) { c.Token = []byte("t") }},
		{"MTU", func(c *Config) { c.MTU = 10 }},
		{"Space", func(c *Config) { c.Space = "a b" }},
		{"Space", func(c *Config) { c.Space = "" }},
		{"Region", func(c *Config) { c.Region = 0 }},
		{"Region", func(c *Config) { c.RegionKey = 0 }},
		{"Rank", func(c *Config) { c.Rank = -1 }},
		{"WriteTimeout", func(c *Config) { c.WriteTimeout = time.Hour }},
		{"Lease", func(c *Config) { c.Lease = -time.Second }},
		{"Lease", func(c *Config) { c.Lease = time.Hour }},
		{"GrowAt", func(c *Config) { c.GrowAt = 1.5 }},
		{"GrowAt", func(c *Config) { c.GrowAt = -0.5 }},
		{"Clients", func(c *Config) { c.Clients = []string{"app/1"} }},
		{"MetricsAddr", func(c *Config) { c.MetricsAddr = "x" }},
	} {
		cfg := goodConfig()
		c.mod(&cfg)
		_, err := New(cfg)
		fe, ok := errors.AsType[*FieldError](err)
		if !ok || fe.Field != c.field || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", c.field, err)
		}
	}
}

// TestSpaceFile writes a space file and reads it back; a file others may
// read, an existing one, and garbage are refused.
func TestSpaceFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cache.space")
	sp := Space{Name: "cache", Region: 3, Key: 0xfeedface}
	if err := WriteSpaceFile(p, sp); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSpaceFile(p); err != nil || got != sp {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if err := WriteSpaceFile(p, sp); err == nil {
		t.Fatal("an existing space file was overwritten")
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSpaceFile(p); !errors.Is(err, secretfile.ErrExposed) {
		t.Fatalf("a space file others may read: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	for _, s := range []string{"{", `{"space":"x y","region":1,"key":"0x1"}`, `{"space":"x","region":0,"key":"0x1"}`, `{"space":"x","region":1,"key":"zz"}`} {
		if err := os.WriteFile(bad, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadSpaceFile(bad); err == nil {
			t.Errorf("%s: read as a space file", s)
		}
	}
}

// TestOwnerDaemon runs a switch, a memory node and a key space with one
// owner daemon on loopback UDP: a client's writes reach the owner, its
// reads the memory node, and the metrics count them.
func TestOwnerDaemon(t *testing.T) {
	token := []byte("kvd test token")
	sw, err := switchd.Start(switchd.Config{Listen: "127.0.0.1:0", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	swAddr := sw.Addr().String()
	mn, err := memd.Start(memd.Config{Listen: "127.0.0.1:0", Size: 4 << 20, Switch: swAddr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer mn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fab := endpoint.FabricOptions{Token: token}
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	pc, err := pool.New(ep, swAddr, pool.Options{Fabric: fab})
	if err != nil {
		t.Fatal(err)
	}
	var reg *pool.Region
	for reg == nil { // until the memory node has lent its memory
		if reg, err = kv.Create(ctx, pc, kv.Layout{Shards: 2, Buckets: 8, MaxBuckets: 32, PageBytes: 4096, HeapBytes: 8 * 4096, Owners: 1}, pool.AllocOptions{}); ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cfg := goodConfig()
	cfg.Switch, cfg.Insecure, cfg.Token, cfg.Region, cfg.RegionKey, cfg.MetricsAddr = swAddr, false, token, reg.ID(), reg.Key(), "127.0.0.1:0"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := kv.Open(ctx, ep, pc, kv.ClientConfig{Switch: swAddr, Fabric: fab, Space: "cache"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetWith(ctx, []byte("k"), []byte("v"), kv.SetOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if v, _, err := c.Get(ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("get: %q %v", v, err)
	}
	if _, err := c.Add(ctx, []byte("k"), []byte("w")); !errors.Is(err, kv.ErrExists) {
		t.Fatalf("add of a present key: %v", err)
	}
	m := daemontest.Scrape(t, d.MetricsAddr())
	if m[`ndma_kvd_writes_total{result="applied"}`] != 1 || m[`ndma_kvd_writes_total{result="refused"}`] != 1 || m["ndma_kvd_keys"] != 1 {
		t.Fatalf("metrics: applied %v refused %v keys %v", m[`ndma_kvd_writes_total{result="applied"}`], m[`ndma_kvd_writes_total{result="refused"}`], m["ndma_kvd_keys"])
	}
	if m["ndma_kvd_table_buckets"] != 16 || m["ndma_kvd_table_growths_total"] != 0 {
		t.Fatalf("metrics: table buckets %v, growths %v; want 16, 0", m["ndma_kvd_table_buckets"], m["ndma_kvd_table_growths_total"])
	}
	for i := range 20 { // past the first tables' 16 buckets
		if _, err := c.Set(ctx, fmt.Appendf(nil, "key%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	m = daemontest.Scrape(t, d.MetricsAddr())
	if m["ndma_kvd_keys"] != 21 || m["ndma_kvd_table_buckets"] <= 16 || m["ndma_kvd_table_growths_total"] == 0 {
		t.Fatalf("metrics after 20 more keys: keys %v, table buckets %v, growths %v", m["ndma_kvd_keys"], m["ndma_kvd_table_buckets"], m["ndma_kvd_table_growths_total"])
	}
	// A large value, written one-sidedly into a slot the owner reserved.
	big := bytes.Repeat([]byte("one-sided "), 200)
	c1, err := kv.Open(ctx, ep, pc, kv.ClientConfig{Switch: swAddr, Fabric: fab, Space: "cache", OneSidedFrom: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Set(ctx, []byte("big"), big); err != nil {
		t.Fatal(err)
	}
	if v, _, err := c.Get(ctx, []byte("big")); err != nil || !bytes.Equal(v, big) || c1.Stats().OneSided != 1 {
		t.Fatalf("a one-sided value: %d bytes, %v, %d written one-sidedly", len(v), err, c1.Stats().OneSided)
	}
	m = daemontest.Scrape(t, d.MetricsAddr())
	// (Reserved: the slot asked for, and the spare the publish brought.)
	if m[`ndma_kvd_one_sided_total{outcome="reserved"}`] != 2 || m[`ndma_kvd_one_sided_total{outcome="published"}`] != 1 {
		t.Fatalf("metrics of one-sided values: reserved %v, published %v", m[`ndma_kvd_one_sided_total{outcome="reserved"}`], m[`ndma_kvd_one_sided_total{outcome="published"}`])
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Reads go on without the owner.
	if v, _, err := c.Get(ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("get with the owner gone: %q %v", v, err)
	}
}
