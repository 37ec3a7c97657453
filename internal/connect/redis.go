// Package connect makes the bridge's clients of the outside world from their
// configuration, in one place for `bridge run` (package bridge) and the CLI's `bridge
// redrive`: the Redis client of any topology (URL, Sentinel, Cluster) with its ACL user
// and TLS, the NATS connection options (credentials, nkey, TLS), and Kafka's TLS and SASL
// with the start-up check of the credentials.
package connect

import (
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is where and how to reach Redis, in any topology: exactly one of URL,
// ClusterAddrs and SentinelAddrs decides it (Sentinel first, then Cluster, else URL).
// Package config builds it from the BRIDGE_REDIS_* variables (config.Redis.Connect) and
// has validated it; connect does not check it again.
type Redis struct {
	// URL is a standalone Redis: redis:// or rediss:// (TLS), user and password in the
	// URL for ACL, the database as the path.
	URL string
	// ClusterAddrs are Redis Cluster seed addresses (host:port).
	ClusterAddrs []string
	// SentinelAddrs are Redis Sentinel addresses (host:port) that name the primary of
	// SentinelMaster.
	SentinelAddrs  []string
	SentinelMaster string
	// Username and Password are the ACL user and its password, in every topology; set,
	// they override the URL's.
	Username, Password string
	// TLSCAFile, TLSCertFile and TLSKeyFile are PEM files: the CAs of the server
	// certificate (set, it turns TLS on) and a client certificate and key (mutual TLS).
	TLSCAFile, TLSCertFile, TLSKeyFile string
}

const (
	// clusterReloadInterval bounds how stale the cluster client's slot map may get. go-redis
	// reloads it at once on MOVED/ASK, but a killed master answers nothing: without a
	// periodic reload the client keeps dialling it until its default minute is over, long
	// after a replica took over.
	clusterReloadInterval = time.Second
	// clusterMaxRedirects is how many MOVED/ASK redirects and network retries one command
	// may follow. A slot in migration costs a command two hops (ASK, then the importing
	// node), and a reshard or failover can move it again meanwhile; go-redis' default of
	// 3 can surface a redirect to the bridge in the middle of a reshard.
	clusterMaxRedirects = 8
)

// redisOptions turns the Redis configuration into go-redis options for any topology:
// Addrs holds the standalone address, the cluster seeds or the sentinels; MasterName is set
// for Sentinel, IsClusterMode for Cluster. BRIDGE_REDIS_USERNAME and BRIDGE_REDIS_PASSWORD
// apply to the data nodes of every topology and override a URL's user and password. The
// configuration is validated by config.Load; a URL that does not parse yields the options of
// the default address (it cannot happen after Load).
func redisOptions(cfg Redis) *redis.UniversalOptions {
	var o *redis.UniversalOptions
	switch {
	case len(cfg.SentinelAddrs) > 0:
		o = &redis.UniversalOptions{Addrs: cfg.SentinelAddrs, MasterName: cfg.SentinelMaster}
	case len(cfg.ClusterAddrs) > 0:
		o = &redis.UniversalOptions{
			Addrs:         cfg.ClusterAddrs,
			IsClusterMode: true,
			MaxRedirects:  clusterMaxRedirects,
		}
	default:
		o = fromURL(cfg.URL)
	}
	// Context deadlines bound every call, so that no caller waits on an unresponsive Redis
	// longer than its own timeout (a URL's query may still set read_timeout and the like).
	o.ContextTimeoutEnabled = true
	if cfg.Username != "" {
		o.Username = cfg.Username
	}
	if cfg.Password != "" {
		o.Password = cfg.Password
	}
	return o
}

// fromURL carries everything redis.ParseURL reads from a standalone URL (address, database,
// credentials, TLS, and the query parameters) into universal options.
func fromURL(url string) *redis.UniversalOptions {
	p, err := redis.ParseURL(url)
	if err != nil {
		return &redis.UniversalOptions{}
	}
	return &redis.UniversalOptions{
		Addrs:                   []string{p.Addr},
		DB:                      p.DB,
		Username:                p.Username,
		Password:                p.Password,
		TLSConfig:               p.TLSConfig,
		Protocol:                p.Protocol,
		ClientName:              p.ClientName,
		MaxRetries:              p.MaxRetries,
		MinRetryBackoff:         p.MinRetryBackoff,
		MaxRetryBackoff:         p.MaxRetryBackoff,
		DialTimeout:             p.DialTimeout,
		ReadTimeout:             p.ReadTimeout,
		WriteTimeout:            p.WriteTimeout,
		PoolFIFO:                p.PoolFIFO,
		PoolSize:                p.PoolSize,
		PoolTimeout:             p.PoolTimeout,
		MinIdleConns:            p.MinIdleConns,
		MaxIdleConns:            p.MaxIdleConns,
		MaxActiveConns:          p.MaxActiveConns,
		MaxConcurrentDials:      p.MaxConcurrentDials,
		PipelinePoolSize:        p.PipelinePoolSize,
		PipelineReadBufferSize:  p.PipelineReadBufferSize,
		PipelineWriteBufferSize: p.PipelineWriteBufferSize,
		ConnMaxIdleTime:         p.ConnMaxIdleTime,
		ConnMaxLifetime:         p.ConnMaxLifetime,
		ConnMaxLifetimeJitter:   p.ConnMaxLifetimeJitter,
	}
}

// RedisClient returns the client of the configured topology: a FailoverClient that asks
// the sentinels for the primary and follows switch-overs, a ClusterClient that reloads its
// slot map every second, or a plain client. TLS and credentials (redisSecurity) apply to the
// data nodes of every topology.
func RedisClient(cfg Redis, logger *slog.Logger) (redis.UniversalClient, error) {
	sec, err := newRedisSecurity(cfg)
	if err != nil {
		return nil, err
	}
	o := redisOptions(cfg)
	sec.apply(&o.TLSConfig, &o.Username, &o.Password, logger)
	switch {
	case o.MasterName != "":
		return redis.NewFailoverClient(o.Failover()), nil
	case o.IsClusterMode:
		co := o.Cluster()
		co.ClusterStateReloadInterval = clusterReloadInterval
		return redis.NewClusterClient(co), nil
	default:
		return redis.NewClient(o.Simple()), nil
	}
}
