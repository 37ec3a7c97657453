package httpapi

// DeadLetter is one dead letter in GET /v1/dead-letters (docs/contract.md section 10).
type DeadLetter struct {
	// ID: on NATS the dead-letter stream's sequence, on Kafka "<partition>:<offset>".
	ID     string `json:"id"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
	Target string `json:"target"`
	// At is when the letter was stored, unix ms.
	At   int64 `json:"at"`
	Size int64 `json:"size"`
}

// DeadLettersResponse is the 200 body of GET /v1/dead-letters.
type DeadLettersResponse struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  *string      `json:"next_cursor"`
}

// RedriveRequest is the body of POST /v1/dead-letters/redrive: exactly one of Reason and
// IDs.
type RedriveRequest struct {
	Reason string   `json:"reason,omitempty"`
	IDs    []string `json:"ids,omitempty"`
	DryRun bool     `json:"dry_run"`
	// Broker is "nats" or "kafka", needed only when both are configured (default: the
	// API's default broker).
	Broker string `json:"broker,omitempty"`
}

// RedriveTally counts the letters of one reason (internal/redrive.Tally).
type RedriveTally struct {
	Redriven int `json:"redriven"`
	Refused  int `json:"refused_again"`
	Other    int `json:"other_run"`
	Selected int `json:"selected"`
	Left     int `json:"left"`
}

// RedriveResponse is the 200 body of POST /v1/dead-letters/redrive.
type RedriveResponse struct {
	DryRun bool `json:"dry_run"`
	// Matched letters were selected (found, of the reason or ids asked for, and
	// redrivable); Changed were sent back to the ingress and left the dead-letter store
	// (redriven plus refused again). A dry run changes nothing.
	Matched  int                     `json:"matched"`
	Changed  int                     `json:"changed"`
	ByReason map[string]RedriveTally `json:"by_reason"`
	// More: the request stopped at its time limit with letters still to look at; send it
	// again to go on (letters already sent back are gone and not sent twice).
	More bool `json:"more"`
}

// Header is one header of a dead letter, as stored.
type Header struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// DeadLetterDetail is the 200 body of GET /v1/dead-letters/{id}: the letter as listed, its
// headers in order and its payload: as text when it is valid UTF-8 (PayloadEncoding
// "text"), else base64 ("base64"). A client shows both as text, never as markup.
type DeadLetterDetail struct {
	DeadLetter
	Broker          string   `json:"broker"`
	Headers         []Header `json:"headers"`
	Payload         string   `json:"payload"`
	PayloadEncoding string   `json:"payload_encoding"`
	// PayloadSize is the payload's size in bytes as stored (Size is the size it had when a
	// letter was sent without its payload).
	PayloadSize int `json:"payload_size"`
}

// DeadLetterCountsResponse is the 200 body of GET /v1/dead-letters/counts: the letters
// by reason code. Complete is false when the count stopped at its time limit: the counts
// are then those of the oldest letters, the ones read.
type DeadLetterCountsResponse struct {
	Broker   string         `json:"broker"`
	ByReason map[string]int `json:"by_reason"`
	Total    int            `json:"total"`
	Complete bool           `json:"complete"`
}

// PurgeTally counts the letters of one reason in a purge.
type PurgeTally struct {
	// Selected were deleted (a dry run: would be).
	Selected int `json:"selected"`
	Purged   int `json:"purged"`
	// Other were claimed or deleted by another run at the same time.
	Other int `json:"other_run"`
	// Left were not selected: they stay.
	Left int `json:"left"`
}

// PurgeResponse is the 200 body of POST /v1/dead-letters/purge (its request is a
// RedriveRequest): Matched letters were selected, Purged deleted (0 in a dry run).
type PurgeResponse struct {
	DryRun   bool                  `json:"dry_run"`
	OpID     string                `json:"op_id,omitempty"`
	Matched  int                   `json:"matched"`
	Purged   int                   `json:"purged"`
	ByReason map[string]PurgeTally `json:"by_reason"`
	// More: the request stopped at its time limit with letters to look at: send it again.
	More bool `json:"more"`
}
