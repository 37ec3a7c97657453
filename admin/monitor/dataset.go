package monitor

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaybridge/delaybridge/delaystore"
)

// datasetCheckInterval is how often the dataset epoch is read (docs/faults.md B10): one GET per
// Redis master (delaystore.CheckDataset), every shard only after a reset was found.
const datasetCheckInterval = 2 * time.Second

// DatasetWatch detects a Redis that came back empty under the bridge (FLUSHALL, a restart
// without persistence, a new pod without its volume). The loss itself cannot be prevented;
// the watch says so once per reset, with one ERROR line and a counter, and the bridge goes on.
type DatasetWatch struct {
	store  *delaystore.Store
	log    *slog.Logger
	resets prometheus.Counter
}

// NewDatasetWatch registers delaybridge_redis_dataset_reset_total with reg and returns a
// watch of store; start it with Run.
func NewDatasetWatch(store *delaystore.Store, logger *slog.Logger, reg prometheus.Registerer) (*DatasetWatch, error) {
	resets := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "delaybridge_redis_dataset_reset_total",
		Help: "Times this replica found the Redis dataset reset (epoch keys gone): messages parked before were lost by Redis.",
	})
	if err := reg.Register(resets); err != nil {
		return nil, err
	}
	return &DatasetWatch{store: store, log: logger.With("component", "dataset"), resets: resets}, nil
}

// Run checks every datasetCheckInterval until ctx is cancelled; it returns nil then.
// Redis errors are left to the components that need Redis (they log and retry).
func (d *DatasetWatch) Run(ctx context.Context) error {
	tick := time.NewTicker(datasetCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		reset, err := d.store.CheckDataset(ctx)
		if err != nil {
			d.log.Debug("dataset check", "err", err)
			continue
		}
		if len(reset) > 0 {
			d.resets.Inc()
			d.log.Error("Redis dataset was reset: messages parked before were lost by Redis and will not be delivered "+
				"(FLUSHALL, a restart without persistence, or a new Redis without its data); going on with an empty store",
				"shards", len(reset), "of", d.store.Shards())
		}
	}
}
