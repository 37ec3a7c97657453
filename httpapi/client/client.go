// Package client is the Go client of the message API (package api), used by the `bridge
// send|stats|cancel` commands.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/delaybridge/delaybridge/httpapi"
)

// Client calls a running bridge's message API. Safe for concurrent use.
type Client struct {
	// Base is the API root, e.g. "http://127.0.0.1:8081".
	Base string
	// Token is sent as a bearer token when set.
	Token string
	// HTTP is the client used; nil means http.DefaultClient.
	HTTP *http.Client
	// Actor, when set, is sent as X-Delay-Actor: who makes the changes, for the audit log
	// (the CLI sends the OS user).
	Actor string
}

// Send schedules a message (POST /v1/messages).
func (c *Client) Send(ctx context.Context, req httpapi.PostRequest) (httpapi.PostResponse, error) {
	var out httpapi.PostResponse
	err := c.do(ctx, http.MethodPost, "/v1/messages", req, http.StatusCreated, &out)
	return out, err
}

// Stats returns the store statistics (GET /v1/stats).
func (c *Client) Stats(ctx context.Context) (httpapi.StatsResponse, error) {
	var out httpapi.StatsResponse
	err := c.do(ctx, http.MethodGet, "/v1/stats", nil, http.StatusOK, &out)
	return out, err
}

// Get returns a pending message without ordering key (GET /v1/messages/{id}).
func (c *Client) Get(ctx context.Context, id string) (httpapi.MessageResponse, error) {
	return c.GetKey(ctx, id, "")
}

// GetKey returns the pending message id of ordering key key, "" none (GET
// /v1/messages/{id}?ordering_key=K): a keyed message is named by both.
func (c *Client) GetKey(ctx context.Context, id, key string) (httpapi.MessageResponse, error) {
	var out httpapi.MessageResponse
	err := c.do(ctx, http.MethodGet, messagePath(id, key), nil, http.StatusOK, &out)
	return out, err
}

// Cancel removes a pending message without ordering key; it reports false when the id
// was unknown. true means it will never be delivered. A message in delivery (409) is an
// *APIError whose Status is http.StatusConflict and whose Message starts "in_delivery: ":
// it may still be delivered.
func (c *Client) Cancel(ctx context.Context, id string) (bool, error) {
	return c.CancelKey(ctx, id, "")
}

// CancelKey is Cancel of the message id of ordering key key ("" none): a keyed message is
// named by both.
func (c *Client) CancelKey(ctx context.Context, id, key string) (bool, error) {
	err := c.do(ctx, http.MethodDelete, messagePath(id, key), nil, http.StatusNoContent, nil)
	if apiErr, ok := err.(*APIError); ok && apiErr.Status == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

// messagePath is the path of message id of ordering key key ("" none).
func messagePath(id, key string) string {
	p := "/v1/messages/" + url.PathEscape(id)
	if key != "" {
		p += "?" + url.Values{"ordering_key": {key}}.Encode()
	}
	return p
}

// Bulk runs a bulk change (POST /v1/bulk/<op>: "cancel", "reschedule", "deliver-now")
// once; a NextCursor in the answer means it stopped early: send req again with it.
func (c *Client) Bulk(ctx context.Context, op string, req httpapi.BulkRequest) (httpapi.BulkResponse, error) {
	var out httpapi.BulkResponse
	err := c.do(ctx, http.MethodPost, "/v1/bulk/"+url.PathEscape(op), req, http.StatusOK, &out)
	return out, err
}

// Resume finishes a bulk operation that was cut off (POST /v1/bulk/resume), or goes on
// with one that stopped for time: a NextCursor in the answer means resume it again.
func (c *Client) Resume(ctx context.Context, opID string) (httpapi.BulkResponse, error) {
	var out httpapi.BulkResponse
	err := c.do(ctx, http.MethodPost, "/v1/bulk/resume", httpapi.ResumeRequest{OpID: opID}, http.StatusOK, &out)
	return out, err
}

// Audit returns one page of the audit log, newest first (GET /v1/audit); a NextCursor
// in the answer means older entries follow.
func (c *Client) Audit(ctx context.Context, limit int, cursor string) (httpapi.AuditResponse, error) {
	var out httpapi.AuditResponse
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/v1/audit"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out)
	return out, err
}

// FleetOverview is GET /v1/overview?scope=fleet: the fleet's counts.
func (c *Client) FleetOverview(ctx context.Context) (httpapi.FleetOverviewResponse, error) {
	var out httpapi.FleetOverviewResponse
	err := c.do(ctx, http.MethodGet, "/v1/overview?scope=fleet", nil, http.StatusOK, &out)
	return out, err
}

// AuditQuery is GET /v1/audit with query (limit, cursor, actor, op, state).
func (c *Client) AuditQuery(ctx context.Context, query url.Values) (httpapi.AuditResponse, error) {
	var out httpapi.AuditResponse
	path := "/v1/audit"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out)
	return out, err
}

// List returns one page of parked messages (GET /v1/messages with query: target,
// due_from, due_to, limit, cursor); a NextCursor in the answer means more may follow.
func (c *Client) List(ctx context.Context, query url.Values) (httpapi.ListResponse, error) {
	var out httpapi.ListResponse
	path := "/v1/messages"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out)
	return out, err
}

// Targets returns the parked count and next due per target (GET /v1/targets); recount
// first counts every shard from its entries.
func (c *Client) Targets(ctx context.Context, recount bool) (httpapi.TargetsResponse, error) {
	var out httpapi.TargetsResponse
	path := "/v1/targets"
	if recount {
		path += "?recount=1"
	}
	err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out)
	return out, err
}

// PauseTarget pauses the targets glob matches for the whole fleet (POST /v1/targets/pause).
func (c *Client) PauseTarget(ctx context.Context, glob string) (httpapi.PauseResponse, error) {
	var out httpapi.PauseResponse
	err := c.do(ctx, http.MethodPost, "/v1/targets/pause", httpapi.PauseRequest{Target: glob}, http.StatusOK, &out)
	return out, err
}

// ResumeTarget resumes the targets glob matches (POST /v1/targets/resume); it returns once
// their put-back messages got their due time back.
func (c *Client) ResumeTarget(ctx context.Context, glob string) (httpapi.PauseResponse, error) {
	var out httpapi.PauseResponse
	err := c.do(ctx, http.MethodPost, "/v1/targets/resume", httpapi.PauseRequest{Target: glob}, http.StatusOK, &out)
	return out, err
}

// APIError is a non-success answer of the API.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("api: %d %s", e.Status, e.Message) }

func (c *Client) do(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Actor != "" {
		req.Header.Set(httpapi.ActorHeader, c.Actor)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode != want {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &APIError{Status: resp.StatusCode, Message: msg}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}
