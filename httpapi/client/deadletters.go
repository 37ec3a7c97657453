package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/delaybridge/delaybridge/httpapi"
)

// DeadLetters is GET /v1/dead-letters with query (reason, limit, cursor, broker).
func (c *Client) DeadLetters(ctx context.Context, query url.Values) (httpapi.DeadLettersResponse, error) {
	var out httpapi.DeadLettersResponse
	path := "/v1/dead-letters"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out)
	return out, err
}

// Redrive is POST /v1/dead-letters/redrive.
func (c *Client) Redrive(ctx context.Context, req httpapi.RedriveRequest) (httpapi.RedriveResponse, error) {
	var out httpapi.RedriveResponse
	err := c.do(ctx, http.MethodPost, "/v1/dead-letters/redrive", req, http.StatusOK, &out)
	return out, err
}

// DeadLetter is GET /v1/dead-letters/{id} (broker "": the default one).
func (c *Client) DeadLetter(ctx context.Context, id, broker string) (httpapi.DeadLetterDetail, error) {
	var out httpapi.DeadLetterDetail
	path := "/v1/dead-letters/" + url.PathEscape(id)
	if broker != "" {
		path += "?" + url.Values{"broker": {broker}}.Encode()
	}
	err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out)
	return out, err
}

// DeadLetterCounts is GET /v1/dead-letters/counts (broker "": the default one).
func (c *Client) DeadLetterCounts(ctx context.Context, broker string) (httpapi.DeadLetterCountsResponse, error) {
	var out httpapi.DeadLetterCountsResponse
	path := "/v1/dead-letters/counts"
	if broker != "" {
		path += "?" + url.Values{"broker": {broker}}.Encode()
	}
	err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK, &out)
	return out, err
}

// Purge is POST /v1/dead-letters/purge.
func (c *Client) Purge(ctx context.Context, req httpapi.RedriveRequest) (httpapi.PurgeResponse, error) {
	var out httpapi.PurgeResponse
	err := c.do(ctx, http.MethodPost, "/v1/dead-letters/purge", req, http.StatusOK, &out)
	return out, err
}
