package idem

import (
	"bytes"
	"testing"
)

func TestReadAllInto(t *testing.T) {
	t.Parallel()
	body := []byte("0123456789")
	tests := []struct {
		name      string
		buf       []byte
		length    int64
		wantSame  bool // the body is read into buf
		wantBytes []byte
	}{
		{"Room", make([]byte, 0, 11), 10, true, body},
		{"RoomToSpare", make([]byte, 0, 100), 10, true, body},
		{"NoRoomForTheByteAfter", make([]byte, 0, 10), 10, false, body},
		{"NoBuffer", nil, 10, false, body},
		{"UnknownLength", make([]byte, 0, 100), -1, false, body},
		{"LongerThanDeclared", make([]byte, 0, 6), 5, false, body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readAllInto(tt.buf, bytes.NewReader(body), tt.length)
			if err != nil || !bytes.Equal(got, tt.wantBytes) {
				t.Fatalf("readAllInto = %q, %v; want %q", got, err, tt.wantBytes)
			}
			if same := cap(tt.buf) > 0 && &got[:1][0] == &tt.buf[:1][0]; same != tt.wantSame {
				t.Errorf("read into the buffer given: %t, want %t", same, tt.wantSame)
			}
		})
	}
}
