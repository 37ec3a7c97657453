package delaystore

// salvageStored returns what survives of the stored envelope raw of message id, which
// decodeStored refused (Corrupt.Envelope): when its header and the structure of its body
// decode, the body decoded with names (the table of the read) as decodeStored does,
// except that a target or source whose code names lacks is left "" (a code is never
// guessed); otherwise the bytes after the header as Payload, or raw whole when even the
// header is unreadable. It never fails and never panics.
func salvageStored(raw, id string, names *nameTable) Envelope {
	st, err := parseStored(raw)
	if err != nil {
		return Envelope{Payload: []byte(raw)}
	}
	body := []byte(st.body)
	if e, err := decodeBodyAs(body, id, names, true); err == nil {
		return e
	}
	return Envelope{Payload: body}
}
