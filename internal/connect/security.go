package connect

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	kafkabroker "github.com/delaybridge/delaybridge/internal/broker/kafka"
	natsbroker "github.com/delaybridge/delaybridge/internal/broker/nats"
	"github.com/delaybridge/delaybridge/internal/tlsfiles"
)

// redisSecurity is what BRIDGE_REDIS_USERNAME, BRIDGE_REDIS_PASSWORD(_FILE) and the
// BRIDGE_REDIS_TLS_* files add to the Redis client options, in every mode (URL,
// cluster). Built once at start: a bad certificate file fails the start.
type redisSecurity struct {
	user, pass string
	tls        *tls.Config // nil: the files do not turn TLS on
}

func newRedisSecurity(cfg Redis) (redisSecurity, error) {
	s := redisSecurity{user: cfg.Username, pass: cfg.Password}
	files := tlsfiles.Files{CA: cfg.TLSCAFile, Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile}
	if files.Set() {
		conf, err := files.Config("")
		if err != nil {
			return redisSecurity{}, fmt.Errorf("redis %w", err)
		}
		s.tls = conf
	}
	return s, nil
}

// apply overrides the user and password of a client's options when configured, and
// turns TLS on with the configured files (keeping the server name of a rediss:// URL).
// It warns when certificate verification is off (rediss://...?skip_verify=true).
func (s redisSecurity) apply(tlsConf **tls.Config, user, pass *string, logger *slog.Logger) {
	if s.user != "" {
		*user = s.user
	}
	if s.pass != "" {
		*pass = s.pass
	}
	if s.tls != nil {
		conf := s.tls.Clone()
		if *tlsConf != nil {
			conf.ServerName = (*tlsConf).ServerName
			conf.InsecureSkipVerify = (*tlsConf).InsecureSkipVerify
		}
		*tlsConf = conf
	}
	if *tlsConf != nil && (*tlsConf).InsecureSkipVerify {
		logger.Warn("redis TLS certificate verification is OFF (skip_verify in BRIDGE_REDIS_URL): anyone on the path can read and change parked messages")
	}
}

// IsAuthError reports whether err is Redis refusing the credentials or a command
// (ACL), which retrying does not fix: the bridge stops with a clear error instead of
// staying not-ready.
func IsAuthError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// NATSOptions returns the connection options of the NATS adapter's credentials, nkey and
// TLS files (cfg.CredsFile, cfg.NKeyFile, cfg.TLS*File).
func NATSOptions(cfg natsbroker.Config) ([]natsgo.Option, error) {
	sec := natsbroker.Security{CredsFile: cfg.CredsFile, NKeyFile: cfg.NKeyFile}
	files := tlsfiles.Files{CA: cfg.TLSCAFile, Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile}
	if files.Set() {
		conf, err := files.Config("")
		if err != nil {
			return nil, fmt.Errorf("nats %w", err)
		}
		sec.TLS = conf
	}
	return sec.Options()
}

// KafkaSecurity returns the TLS and SASL of the Kafka adapter's configuration
// (cfg.KafkaTLS, cfg.TLS*File, cfg.SASL*).
func KafkaSecurity(cfg kafkabroker.Config) (kafkabroker.Security, error) {
	var sec kafkabroker.Security
	files := tlsfiles.Files{CA: cfg.TLSCAFile, Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile}
	if cfg.KafkaTLS || files.Set() {
		conf, err := files.Config("")
		if err != nil {
			return sec, fmt.Errorf("kafka %w", err)
		}
		sec.TLS = conf
	}
	if cfg.SASLMechanism != "" {
		m, err := kafkabroker.NewSASL(cfg.SASLMechanism, cfg.SASLUsername, cfg.SASLPassword)
		if err != nil {
			return sec, err
		}
		sec.SASL = m
	}
	return sec, nil
}

// CheckKafkaAuth pings the brokers once at start (bounded by 5 s) and returns an error
// only when they refuse the credentials (the brokers' refusal, unwrapped: the caller
// names the settings to check): a broker that is down is not fatal (readiness reports
// it, the clients retry), wrong credentials are.
func CheckKafkaAuth(ctx context.Context, brokers []string, sec kafkabroker.Security) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := kafkabroker.PingWith(ctx, brokers, sec); kafkabroker.IsAuthError(err) {
		return err
	}
	return nil
}

// IsNoDBError reports whether err is Redis refusing the SELECT of a database it does
// not have: a configuration error, not an outage to wait out.
func IsNoDBError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "DB index is out of range")
}
