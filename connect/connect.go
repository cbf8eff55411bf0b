// Package connect makes the go-redis client for a Redis URL: one server,
// TLS, a Cluster or a primary behind Sentinel. The worker's Main, the
// redmap CLI, the examples and bench all take the same URL through it. A
// program may as well build its own go-redis client: managers and workers
// take any redis.UniversalClient.
package connect

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/internal/redisurl"
)

// URL returns a client for the Redis that rawURL names, in one of these
// forms:
//
//	redis://[user:password@]host:port[/db]        one server
//	rediss://[user:password@]host:port[/db]       one server, over TLS
//	redis://host:port?addr=host2:port2&addr=...   a Cluster, from any of its nodes
//	redis://host:port?cluster=true                a Cluster, from one node
//	redis-sentinel://[user:password@]host:port,host:port,...[/db]?master=NAME
//	                                              the primary Sentinel names
//
// TLS: rediss://, or tls=true on the other forms, and these query
// parameters: tls_ca_file (the PEM certificates to trust, for a private CA),
// tls_cert_file and tls_key_file (a client certificate, for servers with
// tls-auth-clients), tls_server_name (the name to verify, if not the host's);
// any of them turns TLS on. Other query parameters are go-redis's options
// (dial_timeout, pool_size, ...: see redis.ParseURL and redis.ParseClusterURL)
// on the redis:// forms; on redis-sentinel://, sentinel_password if the
// Sentinels' password differs from the primary's, which is the one in the URL.
//
// URL only parses: the client connects at its first command. A URL it
// cannot use gives an error naming the part at fault, without the password.
// The same URL works in worker.Main's -redis, the redmap CLI, the examples
// and bench, and REDIS_URL.
func URL(rawURL string) (redis.UniversalClient, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("connect: Redis URL %q: want redis://host:port, rediss://, or redis-sentinel:// (see connect.URL)", Redact(rawURL))
	}
	if scheme == "redis-sentinel" {
		opts, err := redisurl.Sentinel(rawURL)
		if err != nil {
			return nil, fmt.Errorf("connect: Redis URL %s: %w", Redact(rawURL), err)
		}
		return redis.NewFailoverClient(opts), nil
	}
	if scheme != "redis" && scheme != "rediss" {
		return nil, fmt.Errorf("connect: Redis URL scheme %q: want redis, rediss or redis-sentinel", scheme)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("connect: Redis URL %s: %w", Redact(rawURL), redisurl.Cause(err))
	}
	q := u.Query()
	cluster := q.Has("addr")
	if v := q.Get("cluster"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("connect: Redis URL %s: cluster=%q: want true or false", Redact(rawURL), v)
		}
		cluster = cluster || b
		q.Del("cluster")
	}
	tc, err := redisurl.TLS(q, scheme == "rediss", u.Hostname())
	if err != nil {
		return nil, fmt.Errorf("connect: Redis URL %s: %w", Redact(rawURL), err)
	}
	u.RawQuery = q.Encode()
	if cluster {
		opts, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("connect: Redis URL %s: %w", Redact(rawURL), err)
		}
		if tc != nil {
			opts.TLSConfig = tc
		}
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("connect: Redis URL %s: %w", Redact(rawURL), err)
	}
	if tc != nil {
		opts.TLSConfig = tc
	}
	return redis.NewClient(opts), nil
}

// Redact returns a Redis URL with its password, if it has one, replaced
// by "xxxxx", for logs and messages.
func Redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	hosts, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		hosts, tail = rest[:i], rest[i:]
	}
	at := strings.LastIndexByte(hosts, '@')
	if at < 0 {
		return rawURL
	}
	user, _, hasPassword := strings.Cut(hosts[:at], ":")
	if !hasPassword {
		return rawURL
	}
	return scheme + "://" + user + ":xxxxx@" + hosts[at+1:] + tail
}
