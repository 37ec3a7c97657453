package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// tailsN is -tails: live-event streams (GET /v1/events) attached to the bridges, spread
// over the replicas, for every delaybridge row: tails must not change the rows.
var tailsN int

// tailReaders are the streams of one row and what they read.
type tailReaders struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	events atomic.Int64 // data lines read
	missed atomic.Int64 // events the bridge reported missed
	failed atomic.Int64 // streams that could not be opened or ended early
}

// attachTails opens n streams, round-robin over db's bridges, each reading and counting
// every event; it returns once all were answered 200 (or failed).
func attachTails(db *dbSystem, n int) *tailReaders {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &tailReaders{cancel: cancel}
	var opened sync.WaitGroup
	for i := range n {
		b := db.bridges[i%len(db.bridges)]
		opened.Add(1)
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tr.read(ctx, "http://"+b.apiAddr+"/v1/events", &opened)
		}()
	}
	opened.Wait()
	return tr
}

func (tr *tailReaders) read(ctx context.Context, url string, opened *sync.WaitGroup) {
	once := sync.OnceFunc(opened.Done)
	defer once()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		tr.failed.Add(1)
		if err == nil {
			resp.Body.Close()
		}
		return
	}
	defer resp.Body.Close()
	once()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		tr.events.Add(1)
		if strings.HasPrefix(data, `{"type":"missed"`) {
			var m struct {
				Count int64 `json:"count"`
			}
			if json.Unmarshal([]byte(data), &m) == nil {
				tr.missed.Add(m.Count)
			}
		}
	}
	if ctx.Err() == nil {
		tr.failed.Add(1)
	}
}

// stop closes the streams and prints what they read to stderr.
func (tr *tailReaders) stop(row string) {
	tr.cancel()
	tr.wg.Wait()
	fmt.Fprintf(os.Stderr, "  tails (%d) on %s: %d events read, %d reported missed, %d streams failed\n",
		tailsN, row, tr.events.Load(), tr.missed.Load(), tr.failed.Load())
}

// tailsLine names -tails in the report's set-up, when set.
func tailsLine() string {
	if tailsN == 0 {
		return ""
	}
	return fmt.Sprintf("\n- live-event streams attached to the bridges (`-tails`): %d", tailsN)
}
