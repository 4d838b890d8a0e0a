package citest

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/daemon/memd"
	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/mq"
	"github.com/ndma/ndma/mq/kafka"
	"github.com/ndma/ndma/stor"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// boundRef is a default named in the table: `pkg.Config.Field` = value,
// or a package's constant: `pkg.Name` = value.
var boundRef = regexp.MustCompile("`((?:transport|endpoint|fabric)\\.Config\\.[A-Za-z.]+|(?:memd|memnode|stor|wire|transport|coll|mq|kafka)\\.[A-Za-z]+)` = ([0-9]+)(?: (KiB|MiB|GiB|ms|s|min|h)\\b)?")

// TestArchitectureTables checks docs/ARCHITECTURE.md's table of tables
// against the code: every default it names is the one the code applies,
// and every limit of the transport, endpoint and forwarding-node
// configurations that bounds a table is named there.
func TestArchitectureTables(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Tables and their bounds\n")
	if !ok {
		t.Fatal(`docs/ARCHITECTURE.md has no "Tables and their bounds" section`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	configs := map[string]reflect.Value{
		"transport": reflect.ValueOf(transport.Config{}.WithDefaults()),
		"endpoint":  reflect.ValueOf(endpoint.Config{}.WithDefaults()),
		"fabric":    reflect.ValueOf(fabric.Config{}.WithDefaults()),
	}
	consts := map[string]any{
		"memd.ReplyCacheEntries":  memd.ReplyCacheEntries,
		"memd.ReplyCacheTTL":      memd.ReplyCacheTTL,
		"stor.MaxVolumes":         stor.MaxVolumes,
		"stor.MaxNodeExtents":     stor.MaxNodeExtents,
		"stor.MaxGatewayVolumes":  stor.MaxGatewayVolumes,
		"stor.MaxLease":           stor.MaxLease,
		"wire.MaxCRCShifts":       wire.MaxCRCShifts,
		"wire.MaxFences":          wire.MaxFences,
		"memnode.MaxNodeFences":   memnode.MaxNodeFences,
		"memnode.MaxGrants":       memnode.MaxGrants,
		"transport.MaxFreeMsgs":   transport.MaxFreeMsgs,
		"coll.MaxAborts":          coll.MaxAborts,
		"mq.MaxPartitions":        mq.MaxPartitions,
		"mq.MaxGroups":            mq.MaxGroups,
		"mq.MaxCatalogSlots":      mq.MaxCatalogSlots,
		"mq.MaxPushBatch":         mq.MaxPushBatch,
		"mq.MaxSubscribers":       mq.MaxSubscribers,
		"kafka.DefaultMaxConns":   kafka.DefaultMaxConns,
		"kafka.DefaultMaxFrame":   kafka.DefaultMaxFrame,
		"kafka.DefaultFetchBytes": kafka.DefaultFetchBytes,
		"kafka.MaxFetchWait":      kafka.MaxFetchWait,
		"kafka.DefaultMaxGroups":  kafka.DefaultMaxGroups,
		"kafka.DefaultMaxMembers": kafka.DefaultMaxMembers,
	}
	named := map[string]bool{}
	for _, m := range boundRef.FindAllStringSubmatch(section, -1) {
		ref, num, unit := m[1], m[2], m[3]
		named[ref] = true
		var code any
		if v, ok := consts[ref]; ok {
			code = v
		} else {
			pkg, path, _ := strings.Cut(ref, ".Config.")
			f, err := field(configs[pkg], path)
			if err != nil {
				t.Errorf("%s: %v", ref, err)
				continue
			}
			code = f.Interface()
		}
		if err := same(code, num, unit); err != nil {
			t.Errorf("%s: the table says %s %s: %v", ref, num, unit, err)
		}
	}
	if len(named) < 30 {
		t.Fatalf("only %d defaults named in the table", len(named))
	}
	// Every limit that bounds a table is in it.
	notTables := map[string]bool{
		"transport.Config.MaxRTO": true, "transport.Config.MaxCwnd": true, "transport.Config.MaxBurst": true,
	}
	var want []string
	for pkg, v := range configs {
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			if strings.HasPrefix(name, "Max") {
				want = append(want, pkg+".Config."+name)
			}
		}
	}
	lim := reflect.TypeOf(fabric.ControlLimits{})
	for i := range lim.NumField() {
		want = append(want, "fabric.Config.Limits."+lim.Field(i).Name)
	}
	want = append(want, "transport.Config.IdleTimeout", "fabric.Config.AggTimeout", "fabric.Config.AggReclaimAfter", "fabric.Config.AnycastTimeout", "fabric.Config.Pool.Slots")
	for _, ref := range want {
		if !notTables[ref] && !named[ref] {
			t.Errorf("%s bounds a table but docs/ARCHITECTURE.md's table of tables does not name it", ref)
		}
	}
}

// field follows a dotted path of struct fields from v.
func field(v reflect.Value, path string) (reflect.Value, error) {
	if !v.IsValid() {
		return v, fmt.Errorf("unknown package")
	}
	for name := range strings.SplitSeq(path, ".") {
		v = v.FieldByName(name)
		if !v.IsValid() {
			return v, fmt.Errorf("no field %s", name)
		}
	}
	return v, nil
}

// same compares a default from the code with the table's number and unit.
func same(code any, num, unit string) error {
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return err
	}
	switch c := code.(type) {
	case time.Duration:
		u := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "min": time.Minute, "h": time.Hour}[unit]
		if u == 0 {
			return fmt.Errorf("a duration needs a unit")
		}
		if d := time.Duration(n) * u; d != c {
			return fmt.Errorf("the code's default is %v", c)
		}
	case int:
		u := map[string]int64{"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
		if u == 0 {
			return fmt.Errorf("a count or size takes no unit %q", unit)
		}
		if n*u != int64(c) {
			return fmt.Errorf("the code's default is %d", c)
		}
	default:
		return fmt.Errorf("default of type %T", code)
	}
	return nil
}
