package fingerprint

// The fingerprint with its field digests as values, which only tests need:
// the middleware keeps them encoded ([Encoded]).

// fingerprintOf computes the fingerprint of a request with its field
// digests decoded, one by one, for the tests that look at them; the
// middleware and idemfingerprint.New take [Encoded].
// FuzzFingerprintMatchesReference holds this one to the reference's bytes,
// FuzzEncodedFingerprint the middleware's.
func fingerprintOf(p Params) (Fingerprint, error) {
	s := scratchPool.Get().(*scratch)
	defer s.release()
	f, err := s.fingerprint(&p)
	if err != nil {
		return Fingerprint{}, err
	}
	f.fields = s.fieldDigests()
	return f, nil
}

// fieldDigests returns the digests of the fields in s, sorted by pointer,
// with their pointers as strings that share one allocation; nil when the
// body is neither an object nor a form.
func (s *scratch) fieldDigests() []fieldDigest {
	if !s.hasFields {
		return nil
	}
	fields := make([]fieldDigest, len(s.digests))
	all := string(s.pointers)
	start := 0
	for i, end := range s.ends {
		fields[i] = fieldDigest{pointer: all[start:end], digest: s.digests[i]}
		start = end
	}
	sortFields(fields)
	return fields
}

// encodeFields encodes f's field digests as scratch.encodeFields does.
func (f Fingerprint) encodeFields() []byte {
	if f.fields == nil { // not an object; an empty object encodes as {"media":...}
		return nil
	}
	n := encodedFieldsLen(f.Kind)
	for _, d := range f.fields {
		n += encodedFieldLen(len(d.pointer))
	}
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i := range f.fields {
		out = appendEncodedField(out, f.fields[i].pointer, &f.fields[i].digest)
	}
	return appendEncodedKind(out, f.Kind)
}
