package endpoint_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// TestControlNeedsToken: every control call made without a fabric token
// and without Insecure fails at once with an error wrapping
// secure.ErrNoToken, and sends nothing to the switch; a token together
// with Insecure is refused too; a token the switch holds works.
func TestControlNeedsToken(t *testing.T) {
	rdvNet(t, 1, true, func(t *testing.T, srv *fabric.Server, eps []*endpoint.Endpoint) {
		ep, sw := eps[0], rdvSwitch.String()
		ctx := context.Background()
		calls := map[string]func(endpoint.FabricOptions) error{
			"join": func(o endpoint.FabricOptions) error {
				_, err := ep.JoinJob(ctx, sw, "job", 1, 0, o)
				return err
			},
			"register": func(o endpoint.FabricOptions) error {
				_, err := ep.RegisterService(ctx, sw, endpoint.ServiceConfig{Name: "svc", Size: 1, Policy: ctrl.PolicyRoundRobin}, 0,
					func(uint64, endpoint.Caller, []byte) ([]byte, error) { return nil, nil }, o)
				return err
			},
			"anycast": func(o endpoint.FabricOptions) error {
				_, err := ep.Anycast(ctx, sw, "svc", 1, []byte("x"), o)
				return err
			},
			"pool create": func(o endpoint.FabricOptions) error {
				_, _, err := ep.PoolCreate(ctx, sw, ctrl.PoolSpec{Size: 1 << 20}, o)
				return err
			},
			"pool open": func(o endpoint.FabricOptions) error {
				_, err := ep.PoolOpen(ctx, sw, 1, 2, o)
				return err
			},
			"pool free": func(o endpoint.FabricOptions) error { return ep.PoolFree(ctx, sw, 1, 2, o) },
			"pool stat": func(o endpoint.FabricOptions) error {
				_, err := ep.PoolStat(ctx, sw, o)
				return err
			},
		}
		for name, call := range calls {
			if err := call(endpoint.FabricOptions{}); !errors.Is(err, secure.ErrNoToken) {
				t.Errorf("%s without a token: %v, want secure.ErrNoToken", name, err)
			}
			err := call(endpoint.FabricOptions{Token: []byte("t"), Insecure: true})
			if err == nil || errors.Is(err, secure.ErrNoToken) || errors.Is(err, endpoint.ErrNoSwitch) {
				t.Errorf("%s with a token and Insecure: %v, want a refusal before sending", name, err)
			}
		}
		if st := srv.Stats(); st.ControlIn != 0 {
			t.Errorf("the switch got %d control messages, want none", st.ControlIn)
		}
		if _, err := ep.PoolStat(ctx, sw, endpoint.FabricOptions{Token: []byte("t")}); err != nil {
			t.Fatalf("pool stat with the switch's token: %v", err)
		}
	})
}
