// Package httpapi serves the bridge's HTTP endpoints: the operations listener
// (/healthz, /readyz, /metrics) and the message API (/v1/messages, /v1/stats), through
// which clients without a broker library schedule, inspect and cancel delayed messages,
// and which the `bridge send|stats|cancel` commands use.
package httpapi
