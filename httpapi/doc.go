// Package httpapi is what the bridge's two HTTP listeners share: the server that runs a
// handler on a listener with the bridge's limits (Serve, ServeListener, ServerConfig:
// idle keep-alive timeout, connection limit, graceful shutdown) and the message API's JSON
// bodies (wire.go). The handlers and the client are subpackages:
//
//   - ops: the operations listener (/healthz, /readyz with debounced checks, /metrics,
//     optional /debug/pprof/);
//   - api: the message API (/v1/messages, /v1/stats), through which clients without a
//     broker library schedule, inspect and cancel delayed messages;
//   - client: the Go client of the message API, used by `bridge send|stats|cancel`.
package httpapi
