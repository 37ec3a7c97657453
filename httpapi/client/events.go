package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/delaybridge/delaybridge/internal/events"
)

// maxEventLine bounds one line of the event stream the client reads.
const maxEventLine = 1 << 20

// Events streams the fleet's live events (GET /v1/events, target a glob or "" for all)
// and calls fn with each, in order, until ctx ends (then it returns ctx's error), the
// stream ends, or fn returns an error (returned). A refusal is an *APIError (429: too many
// streams on that replica). It blocks; fn runs on the caller's goroutine.
func (c *Client) Events(ctx context.Context, target string, fn func(events.Event) error) error {
	path := "/v1/events"
	if target != "" {
		path += "?target=" + url.QueryEscape(target)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.Base, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &APIError{Status: resp.StatusCode, Message: msg}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // comments, blank lines between events
		}
		var e events.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return fmt.Errorf("GET %s: decode event: %w", path, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
