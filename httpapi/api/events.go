package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/delaybridge/delaybridge/contract"
	"github.com/delaybridge/delaybridge/internal/events"
	"github.com/delaybridge/delaybridge/internal/glob"
)

// Live event stream bounds (docs/design.md "Live events").
const (
	// eventsWriteTimeout is the longest one write to a stream may take: a client that
	// stops reading is dropped after it.
	eventsWriteTimeout = 10 * time.Second
	// eventsPing is the interval of the comment lines that keep an idle stream open
	// through proxies.
	eventsPing = 15 * time.Second
	// eventsChunk is the most events gathered into one write.
	eventsChunk = 256
)

// eventsPath is the stream's route: crossOrigin judges a GET of it as a change.
const eventsPath = "/v1/events"

// events serves GET /v1/events[?target=<glob>]: the fleet's live events as Server-Sent
// Events (one "data:" line of JSON per event), until the client goes or the server shuts
// down. 400 for a malformed or oversized glob, 429 with Retry-After when events.MaxTails
// streams are open on this replica, 501 without a hub.
func (a *api) events(w http.ResponseWriter, r *http.Request) {
	hub := a.cfg.Events
	if hub == nil {
		writeError(w, http.StatusNotImplemented, "this bridge serves no live events")
		return
	}
	var match *glob.Pattern
	if t := r.URL.Query().Get("target"); t != "" {
		p, err := glob.CompileSelector(t)
		if err != nil {
			writeError(w, http.StatusBadRequest, contract.ReasonInvalidRequest+": target: "+err.Error())
			return
		}
		match = p
	}
	if r.Method == http.MethodHead { // the headers of a stream, not one: no tail held
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		return
	}
	sub, err := hub.Tail()
	if errors.Is(err, events.ErrTooManyTails) {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("%s: %d live event streams are open on this replica, the most it serves",
			contract.ReasonTooManyTails, events.MaxTails))
		return
	}
	defer sub.Close()
	rc := http.NewResponseController(w)
	// The server's read and write timeouts are for requests, not streams: lifted here,
	// each write then gets its own deadline.
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := stream{w: w, rc: rc, sub: sub, match: match}
	if !s.write(append(s.buf[:0], ": live events\n\n"...)) {
		return
	}
	ping := time.NewTicker(eventsPing)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-hub.Done():
			return
		case <-ping.C:
			if !s.write(s.missed(s.buf[:0], ": ping\n\n")) {
				return
			}
		case e := <-sub.Events():
			if !s.write(s.gather(e)) {
				return
			}
		}
	}
}

// stream is one client's event stream.
type stream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	sub   *events.Sub
	match *glob.Pattern
	buf   []byte
}

// gather encodes e and the events already waiting (at most eventsChunk), those the
// filter takes, after the count of missed events if any.
func (s *stream) gather(e events.Event) []byte {
	b := s.missed(s.buf[:0], "")
	b = s.event(b, &e)
	for range eventsChunk - 1 {
		select {
		case e := <-s.sub.Events():
			b = s.event(b, &e)
		default:
			return b
		}
	}
	return b
}

// missed appends a missed event when events were lost since the last, else orElse.
func (s *stream) missed(b []byte, orElse string) []byte {
	if n := s.sub.Missed(); n > 0 {
		m := events.Event{Type: events.Missed, At: time.Now().UnixMilli(), Count: n}
		return s.data(b, &m)
	}
	return append(b, orElse...)
}

// event appends e when the filter takes it. An event without a target, and a bulk
// change (a Changed event without an id, whose Target is its selector), pass every filter.
// A glob matches a target as the other selectors of the API do (glob.MatchTarget).
func (s *stream) event(b []byte, e *events.Event) []byte {
	if s.match == nil || e.Target == "" || (e.Type == events.Changed && e.ID == "") || s.match.MatchTarget(e.Target) {
		return s.data(b, e)
	}
	return b
}

func (s *stream) data(b []byte, e *events.Event) []byte {
	b = append(b, "data: "...)
	b = e.AppendJSON(b)
	return append(b, "\n\n"...)
}

// write sends b (nothing when empty) within eventsWriteTimeout and flushes; false when
// the client is gone or too slow.
func (s *stream) write(b []byte) bool {
	s.buf = b[:0]
	if len(b) == 0 {
		return true
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(eventsWriteTimeout))
	if _, err := s.w.Write(b); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// emit tells the hub (when set) of a change made through the API.
func (a *api) emit(op, id, target string, due, count int64) {
	if a.cfg.Events != nil {
		a.cfg.Events.Emit(events.Event{Type: events.Changed, Op: op, ID: id, Target: target, Due: due, Count: count})
	}
}
