// Package config reads every BRIDGE_* variable into one [Config]: [Load] parses a map of
// the environment (caarlos0/env, prefix BRIDGE_), applies the defaults of docs/contract.md section 4,
// validates every value and reports all problems at once, one line per problem naming
// the variable. [Variables] lists the variables for `bridge --help`; [Config.Redacted]
// prints the effective configuration without secrets.
//
// Only cmd/bridge imports this package. It imports the component configs it aggregates
// (delaystore.Config) and nothing that connects anywhere: Load does no I/O.
package config
