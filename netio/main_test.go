package netio

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a reader left
// blocked on a socket, say) outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
