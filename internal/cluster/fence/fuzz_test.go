package fence

import (
	"reflect"
	"testing"
)

// FuzzDecode: Decode never panics, and an accepted record survives an
// Encode/Decode round trip unchanged.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":1,"epoch":12,"owner":"n2","at":"2026-12-01T15:00:00Z"}`))
	f.Add([]byte(`{"version":1,"epoch":0,"at":"2026-12-01T15:00:00Z"}`))
	f.Add([]byte(`{"version":2,"epoch":1,"owner":"n"}`))
	f.Add([]byte(`{"version":1,"epoch":1,"owner":"a/b"}`))
	f.Add([]byte(`{"version":1,"epoch":3,"owner":"n","at":"2026-12-01T15:00:00+01:00"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		b2, err := Encode(r)
		if err != nil {
			t.Fatalf("Encode refuses a decoded record %+v: %v", r, err)
		}
		r2, err := Decode(b2)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip %+v -> %s -> %+v, %v", r, b2, r2, err)
		}
	})
}
