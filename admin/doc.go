// Package admin is the operator's side of the delay store: what the message API, the web
// console and the CLI show and change besides single messages. It holds
//
//   - the listing of parked messages (List, in pages) and the targets' and quotas'
//     reports (Targets, Quotas);
//   - bulk changes (Bulk) and the resumable bulk operations (StartOp, ResumeOp, Op.Run)
//     with their leases and their progress;
//   - the audit log of every change an operator makes (AuditBegin, AuditRecord.End and
//     Hold, AuditList);
//   - the fleet's counts by minute and hour (AddStats, ReadStats);
//   - the one cursor type of every page (Seal, Open: one key, one MAC, a kind per page).
//
// It runs over the primitives that package delaystore exports (Scan, Change, Versions,
// SavedProgress, the audit log's records, ParkedByTarget, QuotaParked, the stats buckets,
// CursorKey) and has no Redis client of its own: every change it makes is one of the
// store's scripts, and every key is the store's. Nothing on the delivery path imports
// it. The Redis monitor and the store's Prometheus gauges are its subpackage monitor.
package admin
