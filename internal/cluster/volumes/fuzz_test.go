package volumes

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/fabraid/fabraid/internal/cluster/model"
)

// FuzzDecode: no record decoder panics; an accepted volume passes check
// and survives a round trip; a refused host key never quotes its input's
// secret.
func FuzzDecode(f *testing.F) {
	v := vol(uuidN(1), "v")
	v.Version = 1
	b, _ := json.Marshal(v)
	f.Add(b)
	v.Attach = &model.AttachList{Nodes: []string{"a", "b"}}
	b, _ = json.Marshal(v)
	f.Add(b)
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"uuid":"` + uuidN(1) + `","state":"optimal","members":[{"slot":0,"role":"failed"}]}`))
	f.Add([]byte(`{"version":1,"secret":"DHHC-1:00:QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB:"}`))
	f.Add([]byte(`{"version":1,"secret":"DHHC-1:00:notbase64notbase64:"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := DecodeVolume(b); err == nil {
			if err := check(v); err != nil {
				t.Fatalf("accepted a volume check refuses: %v", err)
			}
			b2, _ := json.Marshal(v)
			w, err := DecodeVolume(b2)
			if err != nil || !reflect.DeepEqual(v, w) {
				t.Fatalf("round trip: %+v -> %+v, %v", v, w, err)
			}
		}
		DecodeStatus(b)
		if _, err := DecodeHostKey(b); err != nil {
			var raw struct{ Secret string }
			if json.Unmarshal(b, &raw) == nil && len(raw.Secret) > 16 && strings.Contains(err.Error(), raw.Secret) {
				t.Fatalf("error quotes the secret: %v", err)
			}
		}
	})
}
