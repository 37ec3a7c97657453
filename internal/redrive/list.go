package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delaybridge/contract"
	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	"github.com/delaybridge/delaybridge/internal/headers"
)

// Letter is one dead letter as listed (GET /v1/dead-letters).
type Letter struct {
	// ID names the letter in its store: on NATS its stream sequence ("1042"), on Kafka
	// "<partition>:<offset>" ("3:1042"). Options.IDs takes it.
	ID string `json:"id"`
	// Reason is the code of its x-delay-error (the part before ":"; "unknown" without).
	Reason string `json:"reason"`
	// Error is its whole x-delay-error ("" without).
	Error string `json:"error"`
	// Target is its x-target ("" without).
	Target string `json:"target"`
	// At is when it was stored (the stream message's or the record's time), unix ms.
	At int64 `json:"at"`
	// Size is its payload's size in bytes; for a letter sent without its payload, the
	// size it had (x-delay-original-size).
	Size int64 `json:"size"`
}

// ListQuery selects one page of dead letters.
type ListQuery struct {
	// Reason keeps only letters of this reason code; "": every letter.
	Reason string
	// Limit is the most letters on the page (at least 1).
	Limit int
	// From is where to go on: a Page.Next of an earlier page ("": from the start). It is a
	// position made by List, to be handed back unchanged (the API seals it).
	From string
	// Budget bounds how long the page reads (a rare reason may need many letters read):
	// past it the page ends with what it found and Next. 0: no bound.
	Budget time.Duration
}

// Page is one page of dead letters, in store order (NATS: sequence; Kafka: partition,
// then offset).
type Page struct {
	Letters []Letter
	// Next is where the next page starts; "" when the store was read to its end.
	Next string
}

// errBadPosition: a Page.Next that List did not make.
var errBadPosition = errors.New("bad position")

// letterOf describes a stored letter.
func letterOf(id string, h headers.List, at time.Time, size int) Letter {
	l := Letter{ID: id, Reason: reasonOf(h), At: at.UnixMilli(), Size: int64(size)}
	l.Error, _ = h.Get(contract.HeaderError)
	l.Target, _ = h.Get(contract.HeaderTarget)
	if v, ok := h.Get(contract.HeaderOriginalSize); ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 {
			l.Size = n
		}
	}
	return l
}

// pageClock ends a page at its budget.
type pageClock struct{ until time.Time }

func newPageClock(budget time.Duration) pageClock {
	if budget <= 0 {
		return pageClock{}
	}
	return pageClock{until: time.Now().Add(budget)}
}

func (c pageClock) over() bool { return !c.until.IsZero() && !time.Now().Before(c.until) }

// ListNATS reads one page of the dead letters that the stream capturing cfg.DLQSubject
// holds, by sequence ("the next message on the subject at or after N", as a redrive run
// reads them): no consumer is created and nothing in the stream changes. It blocks for
// one round trip per letter read, up to q.Limit letters kept or q.Budget; ctx cancels it.
func ListNATS(ctx context.Context, nc *natsgo.Conn, cfg NATSConfig, q ListQuery) (Page, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	seq := uint64(1)
	if q.From != "" {
		var err error
		if seq, err = strconv.ParseUint(q.From, 10, 64); err != nil || seq == 0 {
			return Page{}, fmt.Errorf("%w %q", errBadPosition, q.From)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return Page{}, fmt.Errorf("jetstream: %w", err)
	}
	stream, err := dlqStream(ctx, js, cfg.DLQSubject)
	if err != nil {
		return Page{}, err
	}
	clock := newPageClock(q.Budget)
	if info := stream.CachedInfo(); info != nil && info.Config.AllowDirect {
		// A stream that keeps only the dead-letter subject is read without a subject
		// filter: the server's filtered batch costs several times more per message.
		only := len(info.Config.Subjects) == 1 && info.Config.Subjects[0] == cfg.DLQSubject
		return listDirect(ctx, nc, info.Config.Name, cfg, q, seq, only, clock)
	}
	r := &natsRun{stream: stream, cfg: cfg}
	page := Page{Letters: []Letter{}}
	for {
		m, err := r.next(ctx, seq)
		if err != nil || m == nil {
			return page, err
		}
		seq = m.Sequence + 1
		h := fromNATS(m.Header)
		if q.Reason == "" || reasonOf(h) == q.Reason {
			page.Letters = append(page.Letters, letterOf(strconv.FormatUint(m.Sequence, 10), h, m.Time, len(m.Data)))
		}
		if len(page.Letters) >= q.Limit || clock.over() {
			page.Next = strconv.FormatUint(seq, 10)
			return page, nil
		}
	}
}

// listDirect is ListNATS on a stream that allows direct gets: batched direct gets ("up to
// n messages on the dead-letter subject from sequence N", nats-server 2.11 and later), one
// round trip for up to a page of letters rather than one per letter. When only (the stream
// keeps nothing but the dead-letter subject) the batch asks for any subject and the
// messages are checked here.
func listDirect(ctx context.Context, nc *natsgo.Conn, stream string, cfg NATSConfig, q ListQuery, seq uint64, only bool, clock pageClock) (Page, error) {
	page := Page{Letters: []Letter{}}
	filter := cfg.DLQSubject
	if only {
		filter = ""
	}
	for {
		msgs, err := directBatch(ctx, nc, stream, filter, seq, q.Limit, cfg.Timeout)
		if err != nil || len(msgs) == 0 {
			return page, err
		}
		for _, m := range msgs {
			mseq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil || mseq < seq {
				return Page{}, fmt.Errorf("direct get of the dead letters from %d: bad %s %q", seq, jetstream.SequenceHeader, m.Header.Get(jetstream.SequenceHeader))
			}
			seq = mseq + 1
			if m.Header.Get(jetstream.SubjectHeader) != cfg.DLQSubject {
				continue
			}
			at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
			h := fromNATS(m.Header)
			if q.Reason == "" || reasonOf(h) == q.Reason {
				page.Letters = append(page.Letters, letterOf(strconv.FormatUint(mseq, 10), h, at, len(m.Data)))
			}
			if len(page.Letters) >= q.Limit {
				page.Next = strconv.FormatUint(seq, 10)
				return page, nil
			}
		}
		if clock.over() {
			page.Next = strconv.FormatUint(seq, 10)
			return page, nil
		}
	}
}

// directBatch asks stream for up to n messages on subject ("": any) from sequence seq with
// one batched direct get, and returns them in order: none when there is none from seq.
// The server may send fewer (it bounds a batch's bytes); the batch ends with an EOB status.
func directBatch(ctx context.Context, nc *natsgo.Conn, stream, subject string, seq uint64, n int, timeout time.Duration) ([]*natsgo.Msg, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj,omitempty"`
		Batch   int    `json:"batch"`
	}{seq, subject, n})
	if err != nil {
		return nil, err
	}
	sub, err := nc.SubscribeSync(nc.NewRespInbox())
	if err != nil {
		return nil, fmt.Errorf("direct get: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, sub.Subject, req); err != nil {
		return nil, fmt.Errorf("direct get: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out []*natsgo.Msg
	for {
		m, err := sub.NextMsgWithContext(dctx)
		if err != nil {
			return nil, fmt.Errorf("direct get of the dead letters from %d: %w", seq, err)
		}
		switch status := m.Header.Get("Status"); status {
		case "":
			out = append(out, m)
		case "204": // end of the batch
			return out, nil
		case "404": // none from seq
			return out, nil
		default:
			return nil, fmt.Errorf("direct get of the dead letters from %d: status %s %s", seq, status, m.Header.Get("Description"))
		}
	}
}

// ListKafka reads one page of the dead letters of cfg.DLQTopic that a redrive run would
// look at: from the offsets that the group cfg.Group committed (the first ones when none)
// up to the end offsets now, partition by partition. It reads each partition as a reader
// outside any group and commits nothing. It blocks until q.Limit letters were kept, the
// end offsets were reached, or q.Budget passed; ctx cancels it.
func ListKafka(ctx context.Context, cfg KafkaConfig, q ListQuery) (Page, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	from, err := parseKafkaPosition(q.From)
	if err != nil {
		return Page{}, err
	}
	cl, err := kgo.NewClient(append(kafkabroker.ClientOpts(cfg.Brokers, kafkabroker.DefaultClientID+"-deadletters", cfg.Security),
		kgo.MaxVersions(kafkabroker.AdminVersions()))...)
	if err != nil {
		return Page{}, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	r := &kafkaRun{cfg: cfg, opts: Options{DryRun: true}, cl: cl}
	ranges, err := r.ranges(ctx)
	if err != nil {
		return Page{}, err
	}
	for p, sp := range ranges { // a position never goes back before the committed offset
		if o, ok := from[p]; ok || from != nil {
			if !ok {
				o = sp.to // not named: done
			}
			ranges[p] = span{from: min(max(sp.from, o), sp.to), to: sp.to}
		}
	}
	clock := newPageClock(q.Budget)
	page := Page{Letters: []Letter{}}
	parts := sortedKeys(ranges)
	for i, p := range parts {
		next, err := r.listPartition(ctx, p, ranges[p], q, clock, &page)
		if err != nil {
			return Page{}, err
		}
		ranges[p] = span{from: next, to: ranges[p].to}
		if next < ranges[p].to {
			page.Next = kafkaPosition(ranges, parts[i:])
			return page, nil
		}
	}
	return page, nil
}

// listPartition adds the letters of partition p from sp.from to page, until sp.to, the
// page's limit or its clock; it returns the offset to go on from.
func (r *kafkaRun) listPartition(ctx context.Context, p int, sp span, q ListQuery, clock pageClock, page *Page) (int64, error) {
	if sp.from >= sp.to || len(page.Letters) >= q.Limit || clock.over() {
		return sp.from, nil
	}
	next := sp.from
	err := readSpan(ctx, r.cfg, "-deadletters", p, sp, func(m *kgo.Record) (bool, error) {
		next = m.Offset + 1
		var h headers.List
		for _, kh := range m.Headers {
			h.Add(kh.Key, string(kh.Value))
		}
		if q.Reason == "" || reasonOf(h) == q.Reason {
			page.Letters = append(page.Letters, letterOf(KafkaID(p, m.Offset), h, m.Timestamp, len(m.Value)))
		}
		return len(page.Letters) < q.Limit && !clock.over(), nil
	})
	if err != nil {
		return next, err
	}
	if len(page.Letters) < q.Limit && !clock.over() {
		return sp.to, nil // read to the end (what is past the last letter: markers)
	}
	return next, nil
}

// kafkaPosition is where to go on: "<partition>:<offset>" of each partition of parts
// (those not finished), comma-separated; partitions not named are done.
func kafkaPosition(ranges map[int]span, parts []int) string {
	var b strings.Builder
	for _, p := range parts {
		if ranges[p].from >= ranges[p].to {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(KafkaID(p, ranges[p].from))
	}
	return b.String()
}

// parseKafkaPosition reads a kafkaPosition; "" is the start. A position lists the
// partitions left: one it does not name is done (at its end offset).
func parseKafkaPosition(v string) (map[int]int64, error) {
	if v == "" {
		return nil, nil
	}
	out := map[int]int64{}
	for _, f := range strings.Split(v, ",") {
		p, o, err := ParseKafkaID(f)
		if err != nil {
			return nil, fmt.Errorf("%w %q", errBadPosition, v)
		}
		out[p] = o
	}
	return out, nil
}
