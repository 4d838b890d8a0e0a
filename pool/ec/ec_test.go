package ec_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ndma/ndma/pool/ec"
)

func TestCreateRefusesShapes(t *testing.T) {
	for _, c := range []struct{ k, m int }{{0, 2}, {4, 0}, {4, ec.MaxParity + 1}, {250, 7}} {
		if _, err := ec.Create(context.Background(), nil, c.k, c.m, 4096, 1<<20); err == nil || !strings.Contains(err.Error(), "parity shards") {
			t.Errorf("%d+%d shards: %v, want refused", c.k, c.m, err)
		}
	}
	if _, err := ec.Create(context.Background(), nil, 4, 2, 0, 1<<20); err == nil {
		t.Errorf("shards of 0 bytes accepted")
	}
}
