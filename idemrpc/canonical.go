package idemrpc

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// canonicalJSON is the protojson form of a request message that its
// fingerprint is computed from; see Canonical.
var canonicalJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false}

// Canonical returns the JSON of a request message that the middleware
// fingerprints: protojson with the fields' proto names and without the
// fields that hold their default value. The middleware then canonicalises
// it by RFC 8785, as it does every JSON body, so that the fingerprint
// depends on the message's values alone:
//
//   - not on the order of the fields on the wire, nor on how another
//     version of the client or another language encoded them (protobuf's
//     binary form is not canonical: deterministic marshalling is stable
//     only within one binary);
//   - not on whether a field with its default value (0, "", false, an
//     empty list) was sent or left out, which proto3 cannot tell apart;
//   - not on unknown fields, which a newer client may send and this
//     server cannot read, and so cannot act on either: protojson leaves
//     them out. (A field this server does know is compared, so deploy the
//     server before the clients that send a new field.)
//
// A mismatch names the top-level fields that differ by their proto names,
// as JSON pointers in the problem ("/amount"), and as
// BadRequest.FieldViolation fields ("amount") in the RPC's status.
func Canonical(m proto.Message) ([]byte, error) {
	b, err := canonicalJSON.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("idemrpc: canonical JSON of %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return b, nil
}
