package config

import (
	"errors"
	"testing"
)

func TestFieldError(t *testing.T) {
	errBad := errors.New("invalid value")
	err := error(Invalid("memd", errBad, "Listen", "%q: no port", "x"))
	if got, want := err.Error(), `memd: Listen: invalid value: "x": no port`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	fe, ok := errors.AsType[*FieldError](err)
	if !ok || fe.Field != "Listen" || !errors.Is(err, errBad) {
		t.Errorf("errors.As/Is on %v: %+v, %v", err, fe, ok)
	}
	if got := (&FieldError{Field: "Rate", Err: errBad}).Error(); got != "Rate: invalid value" {
		t.Errorf("without Pkg: %q", got)
	}
}
