package switchd

import (
	"context"
	"net/netip"
	"os"
	"strconv"

	"github.com/ndma/ndma/fabric/ctrlstore/etcdstore"
)

// openEtcd opens the pool map's store in etcd (Config.Etcd) for the
// switch bound to addr; its liveness key is named after the host and
// the port.
func openEtcd(cfg *Config, addr netip.AddrPort) (*etcdstore.Store, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = addr.Addr().String()
	}
	ecfg := etcdstore.Config{Endpoints: cfg.Etcd, Prefix: cfg.EtcdPrefix, Name: host + ":" + strconv.Itoa(int(addr.Port())), Logger: cfg.Logger}
	st, err := etcdstore.Open(context.Background(), ecfg)
	if err != nil {
		return nil, fields.Unusable("Etcd", err)
	}
	n := len(st.Regions())
	cfg.Logger.Info("switchd: pool map kept in etcd", "endpoints", cfg.Etcd, "liveness_key", st.LivenessKey(), "regions", n,
		"records_refused", st.Stats().Refused)
	return st, nil
}

// closeStore closes st if it is open (a Start that failed after it).
func closeStore(st *etcdstore.Store) {
	if st != nil {
		st.Close()
	}
}
