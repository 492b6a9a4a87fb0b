package backend

import (
	"bytes"
	"encoding/gob"

	"google.golang.org/grpc/encoding"
)

// codecName is the gRPC content subtype of the backend service. Messages
// are this package's structs in encoding/gob (no protoc in the build):
// gob matches fields by name, so a newer side's added fields are ignored
// by an older one, and it carries Secret through GobEncode while JSON (what
// loggers use) only ever sees "<secret>".
const codecName = "fabraid-gob"

type gobCodec struct{}

func (gobCodec) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

func (gobCodec) Unmarshal(data []byte, v any) error {
	return gob.NewDecoder(bytes.NewReader(data)).Decode(v)
}

func (gobCodec) Name() string { return codecName }

// grpc looks codecs up by content subtype in its process-wide registry;
// both the host and the plugin import this package.
func init() { encoding.RegisterCodec(gobCodec{}) }
