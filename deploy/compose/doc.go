// Package compose runs deploy/docker-compose.yml for real on the local Docker engine:
// `make e2e-compose` runs its test (build tag compose), which builds every image locally
// (images/*/Dockerfile: no registry is reachable where it runs), brings the stack up with
// local.override.yml (host networking, free ports on 127.0.0.1, a kfake stand-in for
// Kafka), runs the e2e user stories against it and checks what only a container shows.
// The package itself only holds what the offline tests of deploy/ share with that run.
package compose

// BridgeBuild is the build command of the repository's Dockerfile, without its output
// flag, as sh runs it with VERSION set: the compose run builds the bridge on the host with
// exactly this command before copying it into images/bridge (deploy/localimage_test.go
// checks that the Dockerfile still runs it).
const BridgeBuild = `CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}"`

// Images are the local images the compose run builds, by service, each from
// images/<service>/Dockerfile; local.override.yml names the same ones.
var Images = map[string]string{
	"redis":     "delaybridge-local/redis:e2e",
	"nats":      "delaybridge-local/nats:e2e",
	"nats-init": "delaybridge-local/nats-init:e2e",
	"kafka":     "delaybridge-local/kafka-standin:e2e",
	"bridge":    "delaybridge-local/bridge:e2e",
}
