package daemon

import (
	"errors"
	"testing"
)

func TestFields(t *testing.T) {
	errBad := errors.New("invalid value")
	cause := errors.New("no token")
	f := Fields{Pkg: "memd", Sentinel: errBad}
	for _, tc := range []struct {
		err          error
		want         string
		bad, isCause bool
	}{
		{f.Invalid("MTU", "%d bytes (want %d to %d)", 10, 160, 9000), "memd: MTU: invalid value: 10 bytes (want 160 to 9000)", true, false},
		{f.InvalidErr("Token", cause), "memd: Token: invalid value: no token", true, true},
		{f.Unusable("Listen", cause), "memd: Listen: no token", false, true},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if _, ok := errors.AsType[*FieldError](tc.err); !ok {
			t.Errorf("%v: not a *FieldError", tc.err)
		}
		if errors.Is(tc.err, errBad) != tc.bad || errors.Is(tc.err, cause) != tc.isCause {
			t.Errorf("%v: errors.Is(sentinel) = %v, errors.Is(cause) = %v; want %v, %v",
				tc.err, errors.Is(tc.err, errBad), errors.Is(tc.err, cause), tc.bad, tc.isCause)
		}
	}
}
