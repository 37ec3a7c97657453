package httpapi

import "encoding/json"

// The message API's JSON bodies (docs/contract.md section 6), shared by the handler
// (package api) and the client (package client).

// PostRequest is the body of POST /v1/messages.
type PostRequest struct {
	Target    string          `json:"target"`
	Delay     json.RawMessage `json:"delay,omitempty"`
	DeliverAt json.RawMessage `json:"deliver_at,omitempty"`
	// Expires is x-delay-expires: a string in the x-delay grammar or integer ms.
	Expires json.RawMessage `json:"expires,omitempty"`
	// Window is x-delay-window: a string in the x-delay grammar or integer ms, at most 1h.
	Window json.RawMessage `json:"window,omitempty"`
	// Every is x-delay-every: "30s", "0 9 * * 1-5", "CRON_TZ=Europe/Berlin 0 9 * * *".
	Every string `json:"every,omitempty"`
	// MaxWait is x-delay-max-wait, with ID: a string in the x-delay grammar or integer ms.
	MaxWait json.RawMessage `json:"max_wait,omitempty"`
	// Misfire is x-delay-misfire: "once" (the default), "skip" or "all".
	Misfire string `json:"misfire,omitempty"`
	ID      string `json:"id,omitempty"`
	// OrderingKey is x-delay-ordering-key (1 to 256 bytes; "" none): messages with the same
	// key are published one at a time in the order they were parked. A keyed message is
	// named by its key and ID: a replace, read or cancel of it gives the same key.
	OrderingKey   string            `json:"ordering_key,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
}

// PostResponse is the 201 body of POST /v1/messages. InDelivery: the message replaced a
// version of its id that is in delivery, which is still delivered (this one is parked as
// its own firing); absent, a replaced version will not be delivered.
type PostResponse struct {
	ID         string `json:"id"`
	Due        int64  `json:"due"`
	InDelivery bool   `json:"in_delivery,omitempty"`
}

// InDeliveryResponse is the 409 body of DELETE /v1/messages/{id} for a message in
// delivery: Error starts "in_delivery: "; Stopped: a recurring message whose later firings
// were cancelled (the one in delivery may still be published).
type InDeliveryResponse struct {
	Error   string `json:"error"`
	Stopped bool   `json:"stopped,omitempty"`
}

// MessageResponse is the 200 body of GET /v1/messages/{id}.
type MessageResponse struct {
	ID            string            `json:"id"`
	Target        string            `json:"target"`
	Due           int64             `json:"due"`
	Source        string            `json:"source"`
	Headers       map[string]string `json:"headers"`
	PayloadBase64 string            `json:"payload_base64"`
	Attempts      int               `json:"attempts"`
	// Expires is the message's x-delay-expires in milliseconds, absent when none.
	Expires *int64 `json:"expires,omitempty"`
	// Every is the message's recurring schedule, absent when it fires once.
	Every string `json:"every,omitempty"`
	// Misfire is a recurring message's x-delay-misfire ("once", "skip", "all"), absent
	// when it fires once.
	Misfire string `json:"misfire,omitempty"`
	// Window is the message's x-delay-window in milliseconds, absent when none (Due is
	// the drawn time).
	Window *int64 `json:"window,omitempty"`
	// MaxWait is the message's x-delay-max-wait in milliseconds and DueBy its bound (unix
	// ms: the first version's parking time plus the max wait; Due is at most DueBy), both
	// absent when none.
	MaxWait *int64 `json:"max_wait,omitempty"`
	DueBy   *int64 `json:"due_by,omitempty"`
	// OrderingKey is the message's x-delay-ordering-key and HeldBy, while the message
	// before it with that key has not left the store, that message's id; both absent when
	// none.
	OrderingKey string `json:"ordering_key,omitempty"`
	HeldBy      string `json:"held_by,omitempty"`
}

// StatsResponse is the 200 body of GET /v1/stats.
type StatsResponse struct {
	Parked   int64   `json:"parked"`
	PerShard []int64 `json:"per_shard"`
	// NextDue is the earliest due (or lease expiry) in unix ms, null when empty.
	NextDue *int64 `json:"next_due"`
	Now     int64  `json:"now"`
}

// BulkRequest is the body of POST /v1/bulk/cancel, /v1/bulk/reschedule and
// /v1/bulk/deliver-now (docs/contract.md section 8). Times are unix ms or RFC 3339.
type BulkRequest struct {
	// ID (an extension) picks one message; the other selector fields still apply.
	// OrderingKey, with ID, is that message's ordering key (absent: a message without key).
	ID          string          `json:"id,omitempty"`
	OrderingKey string          `json:"ordering_key,omitempty"`
	Target      string          `json:"target,omitempty"`
	DueFrom     json.RawMessage `json:"due_from,omitempty"`
	DueTo       json.RawMessage `json:"due_to,omitempty"`
	DryRun      bool            `json:"dry_run,omitempty"`
	Shift       string          `json:"shift,omitempty"`      // reschedule: "+1h", "-30m"
	DeliverAt   json.RawMessage `json:"deliver_at,omitempty"` // reschedule
	// Cursor goes on where an earlier answer's next_cursor says it stopped.
	Cursor string `json:"cursor,omitempty"`
}

// BulkResponse is the 200 body of a bulk change: NextCursor is set when the request
// stopped before the end (its time was up): send it again with that cursor.
type BulkResponse struct {
	// OpID names the operation in the audit log; POST /v1/bulk/resume finishes it when it
	// was cut off (docs/contract.md section 10).
	OpID       string  `json:"op_id,omitempty"`
	Matched    int     `json:"matched"`
	Changed    int     `json:"changed"`
	NextCursor *string `json:"next_cursor"`
}

// ListedMessage is one message of GET /v1/messages (docs/contract.md section 8). Due is
// its due time; Scheduled (an extension) when it is next taken for delivery: the due
// time, or for a message in flight its next attempt or the end of its lease.
type ListedMessage struct {
	ID        string `json:"id"`
	Target    string `json:"target"`
	Due       int64  `json:"due"`
	Scheduled int64  `json:"scheduled"`
	Attempts  int    `json:"attempts"`
	Size      int    `json:"size"`
	Source    string `json:"source"`
	// Window (an extension) is the message's x-delay-window in ms, absent when none: Due
	// is the time drawn in it.
	Window int64 `json:"window,omitempty"`
	// MaxWait (an extension) is the message's x-delay-max-wait in ms and DueBy its bound
	// (unix ms; Due is at most DueBy), both absent when none.
	MaxWait int64 `json:"max_wait,omitempty"`
	DueBy   int64 `json:"due_by,omitempty"`
	// OrderingKey is the message's x-delay-ordering-key and HeldBy the id of the message
	// before it with that key, which it waits for (its Scheduled is then its Due); both
	// absent when none.
	OrderingKey string `json:"ordering_key,omitempty"`
	HeldBy      string `json:"held_by,omitempty"`
	// Every (an extension) is a recurring message's schedule (x-delay-every), absent for
	// one that fires once (and for one whose headers take more than 1 KiB: not read; GET
	// /v1/messages/{id} shows it).
	Every string `json:"every,omitempty"`
}

// ListResponse is the 200 body of GET /v1/messages: NextCursor is set while more may
// follow (a page may hold fewer than limit messages when its time was up).
type ListResponse struct {
	Messages   []ListedMessage `json:"messages"`
	NextCursor *string         `json:"next_cursor"`
	// Total (an extension) is how many parked messages the selector picks over all its
	// pages, counted when the page was read; TotalEstimated is set when that number is an
	// estimate (a target and a due range together, when counting them exactly would read
	// more than a page's worth of messages; docs/operating.md "Listing").
	Total          int64 `json:"total"`
	TotalEstimated bool  `json:"total_estimated,omitempty"`
}

// TargetResponse is one target of GET /v1/targets: NextDue (unix ms) is null when the
// request's time ran out before the target's first message was found. Window (ms, an
// extension) is the spread window of that next message only, absent when it has none;
// Quota (an extension) the BRIDGE_TARGET_QUOTA pattern the target counts against, absent
// for none.
type TargetResponse struct {
	Target  string `json:"target"`
	Parked  int64  `json:"parked"`
	NextDue *int64 `json:"next_due"`
	Window  int64  `json:"window,omitempty"`
	Quota   string `json:"quota,omitempty"`
	// Paused: a paused glob matches the target (POST /v1/targets/pause).
	Paused bool `json:"paused,omitempty"`
}

// TargetsResponse is the 200 body of GET /v1/targets, most parked first; Quotas (an
// extension) is the use of every BRIDGE_TARGET_QUOTA pattern, in configuration order;
// HeldByOrder (an extension) how many parked messages, of all targets, wait for their
// ordering key's predecessor (each is counted in its target's Parked too).
type TargetsResponse struct {
	Targets     []TargetResponse `json:"targets"`
	Quotas      []QuotaResponse  `json:"quotas"`
	HeldByOrder int64            `json:"held_by_order"`
	// Paused are the paused target globs, by glob (also those matching no parked target).
	Paused []PausedResponse `json:"paused"`
}

// PausedResponse is one paused target glob: Since is when it was paused (unix ms, Redis
// clock).
type PausedResponse struct {
	Target string `json:"target"`
	Since  int64  `json:"since"`
}

// PauseRequest is the body of POST /v1/targets/pause and POST /v1/targets/resume: a
// target glob as BRIDGE_TARGET_RATE's patterns (with ":" against "broker:name", else
// against the name), at most 256 bytes and 16 "*".
type PauseRequest struct {
	Target string `json:"target"`
}

// PauseResponse is the 200 body of POST /v1/targets/pause and /v1/targets/resume.
// Paused is the glob's state after the call; Changed is false when it already was in it
// (paused twice, or resumed while not paused); Since is when it was paused (unix ms; 0
// when it was not). Moved (resume) counts the put-back messages given their due time
// back. OpID is the audit entry.
type PauseResponse struct {
	Target  string `json:"target"`
	Paused  bool   `json:"paused"`
	Changed bool   `json:"changed"`
	Since   int64  `json:"since,omitempty"`
	Moved   int    `json:"moved"`
	OpID    string `json:"op_id,omitempty"`
}

// QuotaResponse is one BRIDGE_TARGET_QUOTA pattern in GET /v1/targets: Parked is the
// fleet's count against it, Limit this replica's quota (0: a pattern counted by another
// replica's configuration that this one lacks), Rejected the messages this replica
// refused for it since it started.
type QuotaResponse struct {
	Pattern  string `json:"pattern"`
	Limit    int64  `json:"limit"`
	Parked   int64  `json:"parked"`
	Rejected uint64 `json:"rejected"`
}

// ForecastResponse is the 200 body of GET /v1/forecast: Overdue messages are scheduled
// at or before From; Counts[i] in (From + i*Step, From + (i+1)*Step]. Unix ms.
type ForecastResponse struct {
	From    int64   `json:"from"`
	Step    int64   `json:"step"`
	Overdue int64   `json:"overdue"`
	Counts  []int64 `json:"counts"`
}

// OverviewResponse is the 200 body of GET /v1/overview: this replica's message counters
// by result since it started (In: parked, invalid, ...; Out: published, retried, ...),
// when it started counting (Since, unix ms: In and Out over the time since are its
// average rates), the dead letters it sent for every reason (DeadLettered: invalid input
// from the brokers, undeliverable and expired messages), the lateness of its deliveries
// (p50 and p99 in ms, never above the largest observed, LatenessMax; null before the
// first), and Redis. Scope is "replica" (GET /v1/overview?scope=fleet answers a
// FleetOverviewResponse).
type OverviewResponse struct {
	Scope        string             `json:"scope"`
	In           map[string]float64 `json:"in"`
	Out          map[string]float64 `json:"out"`
	Since        int64              `json:"since"`
	DeadLettered float64            `json:"dead_lettered"`
	Delivered    uint64             `json:"delivered"`
	LatenessP50  *float64           `json:"lateness_p50_ms"`
	LatenessP99  *float64           `json:"lateness_p99_ms"`
	LatenessMax  *float64           `json:"lateness_max_ms"`
	Redis        string             `json:"redis"`
}
