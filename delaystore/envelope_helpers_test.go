package delaystore

// encodeBody encodes the Go-owned part of a stored envelope of message id with names
// whole (encodeBodySent without codes).
func encodeBody(e Envelope, id string) []byte { return encodeBodySent(e, id, 0, coded{}) }

// decodeBody is the inverse of encodeBody: decodeBodyIn without names.
func decodeBody(b []byte, id string) (Envelope, error) { return decodeBodyIn(b, id, nil) }

// binaryHeader is the binary header of a stored envelope (tests write entries as the
// scripts do).
func binaryHeader(version int64, attempts int, due int64) []byte {
	b := []byte{headerBinary}
	for _, f := range []struct {
		v int64
		n int
	}{{version, 6}, {int64(attempts), 3}, {due, 6}} {
		for i := f.n - 1; i >= 0; i-- {
			b = append(b, byte(f.v>>(8*i)))
		}
	}
	return b
}
