package delaystore

import "context"

// SealCursor seals position raw of a query of kind, for a component that pages through
// something other than the store (the dead letters of the message API) with the store's
// cursor key: a cursor that cannot be forged, that every replica opens, and that is never
// taken for a list or bulk cursor (kinds are kept apart). Safe for concurrent use.
func (s *Store) SealCursor(kind, query, raw string) string {
	return s.seal("sealed:"+kind, query, raw)
}

// OpenCursor checks cursor v, sealed by SealCursor for kind and query, and returns its
// position; an error wrapping ErrBadCursor when it was not (altered, made up, for another
// query or kind). It may read the cursor key from Redis once (ctx bounds it).
func (s *Store) OpenCursor(ctx context.Context, kind, query, v string) (string, error) {
	return s.open(ctx, "sealed:"+kind, query, v)
}
