package httpapi

import "encoding/json"

// The audit log's and resumable bulk operations' JSON bodies (docs/contract.md section
// 10), shared by the handler (package api) and the client (package client).

// ActorHeader is the request header that names who makes a change (the audit log's
// actor); the CLI sends the OS user.
const ActorHeader = "X-Delay-Actor"

// AuditEntry is one entry of GET /v1/audit.
type AuditEntry struct {
	OpID     string          `json:"op_id"`
	At       int64           `json:"at"`
	Op       string          `json:"op"`
	Selector json.RawMessage `json:"selector,omitempty"`
	ID       string          `json:"id,omitempty"`
	// OrderingKey is the ordering key of the message ID (an extension), absent when none.
	OrderingKey string `json:"ordering_key,omitempty"`
	DryRun      bool   `json:"dry_run"`
	Matched     int64  `json:"matched"`
	Changed     int64  `json:"changed"`
	// State is running, done or interrupted (cut off: POST /v1/bulk/resume finishes a
	// resumable one).
	State  string `json:"state"`
	Actor  string `json:"actor"`
	Remote string `json:"remote"`
	// Shift and DeliverAt are a reschedule's values; Resumable marks a bulk operation
	// that POST /v1/bulk/resume takes (extensions).
	Shift     string `json:"shift,omitempty"`
	DeliverAt *int64 `json:"deliver_at,omitempty"`
	Resumable bool   `json:"resumable,omitempty"`
}

// AuditResponse is the 200 body of GET /v1/audit, newest first.
type AuditResponse struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor *string      `json:"next_cursor"`
}

// ResumeRequest is the body of POST /v1/bulk/resume.
type ResumeRequest struct {
	OpID string `json:"op_id"`
}
