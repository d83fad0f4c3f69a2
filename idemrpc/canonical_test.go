package idemrpc_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemkit/idem/idemfingerprint"
	"github.com/idemkit/idem/idemrpc"
)

// request is the descriptor of a payment request: amount = 1, currency =
// 2, customer = 3, description = 4.
func request(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), JsonName: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("canonical_test.proto"), Package: proto.String("test.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("CreatePaymentRequest"),
			Field: []*descriptorpb.FieldDescriptorProto{
				field("amount", 1, descriptorpb.FieldDescriptorProto_TYPE_INT64),
				field("currency", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING),
				field("customer", 3, descriptorpb.FieldDescriptorProto_TYPE_STRING),
				field("description", 4, descriptorpb.FieldDescriptorProto_TYPE_STRING),
			},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

// fingerprint decodes wire as a message of md, and returns the
// fingerprint of its canonical JSON, as the middleware computes it.
func fingerprint(t *testing.T, md protoreflect.MessageDescriptor, wire []byte) idemfingerprint.Fingerprint {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(wire, m); err != nil {
		t.Fatal(err)
	}
	body, err := idemrpc.Canonical(m)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := idemfingerprint.New(idemfingerprint.Params{Method: "POST", Path: "/test.v1.Service/CreatePayment", ContentType: "application/json", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// TestCanonicalFormIgnoresTheEncoding encodes one message two ways, as
// two client versions may: the fields in another order, a field with its
// default value sent explicitly, and a field this server does not know.
// The fingerprints are the same; a changed value changes it.
func TestCanonicalFormIgnoresTheEncoding(t *testing.T) {
	md := request(t)
	var a []byte // field order, defaults left out, as Go's Marshal writes it
	a = protowire.AppendTag(a, 1, protowire.VarintType)
	a = protowire.AppendVarint(a, 4200)
	a = protowire.AppendTag(a, 2, protowire.BytesType)
	a = protowire.AppendString(a, "usd")
	a = protowire.AppendTag(a, 3, protowire.BytesType)
	a = protowire.AppendString(a, "cus_1")

	var b []byte // another client: reversed, an explicit default, an unknown field
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendString(b, "a field of a newer schema")
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, "cus_1")
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, "") // description, its default
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, "usd")
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 4200)

	if bytes.Equal(a, b) {
		t.Fatal("the two encodings are the same bytes")
	}
	fa, fb := fingerprint(t, md, a), fingerprint(t, md, b)
	if !bytes.Equal(fa.Hash, fb.Hash) || !bytes.Equal(fa.Fields, fb.Fields) {
		t.Errorf("fingerprints differ: %x and %x", fa.Hash, fb.Hash)
	}

	var c []byte // the same, with another amount
	c = protowire.AppendTag(c, 1, protowire.VarintType)
	c = protowire.AppendVarint(c, 4201)
	c = append(c, a[3:]...) // the rest of a: currency and customer
	if fc := fingerprint(t, md, c); bytes.Equal(fa.Hash, fc.Hash) {
		t.Error("another amount has the same fingerprint")
	}
}
