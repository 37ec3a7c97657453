// Package testproxy runs Shopify's toxiproxy in-process for fault tests: a TCP proxy on a
// free loopback port in front of a real server (redis-server, nats-server, kfake) that a
// test can cut (refuse and drop every connection), restore, slow down or black-hole with
// toxics, without touching the server behind it.
package testproxy
