package secure

import (
	"testing"

	"github.com/ndma/ndma/wire"
)

// FuzzOpen feeds arbitrary datagrams to an SA's receiving side: it never
// panics, and whatever it refuses leaves the window where it was.
func FuzzOpen(f *testing.F) {
	s, _ := pair(f, AESGCM, true)
	for _, n := range []int{0, 1, 100} {
		pkt, err := s.Seal(packet(f, make([]byte, n)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(pkt)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		_, r := pair(t, AESGCM, true)
		var h wire.Header
		if _, _, err := wire.Parse(pkt, &h); err != nil {
			return
		}
		if _, err := r.Open(&h, pkt); err != nil && r.win.Top() != 0 {
			t.Fatalf("refused packet moved the window to %d", r.win.Top())
		}
	})
}
