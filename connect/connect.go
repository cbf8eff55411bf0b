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
	if _, _, clean := userinfo(strings.TrimPrefix(rawURL, scheme+"://")); !clean {
		// Where the password ends is a guess: no parser's message may
		// quote it.
		return nil, fmt.Errorf("connect: Redis URL %s: not a URL (in a user or a password, / ? # @ and : are written %%2F %%3F %%23 %%40 %%3A)", Redact(rawURL))
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
		// url.Parse's message quotes the part it could not read, which may
		// be a piece of a password holding '/', '?' or '#'.
		return nil, fmt.Errorf("connect: Redis URL %s: not a URL (in a user or a password, / ? # @ and : are written %%2F %%3F %%23 %%40 %%3A)", Redact(rawURL))
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

// Redact returns a Redis URL with its password, if it has one, replaced by
// "xxxxx", and the value of every query parameter whose name holds
// "password" (sentinel_password) too, for logs and messages. A URL with an
// '@' past its hosts (a password holding '/', '?' or '#' unescaped, which a
// URL does not allow, or an '@' in a query value) has everything between
// "://" and its last host redacted, rather than a guess at where the
// password ends.
func Redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		if at := strings.LastIndexByte(rawURL, '@'); at >= 0 {
			return "xxxxx" + rawURL[at:]
		}
		return rawURL
	}
	if info, at, clean := userinfo(rest); !clean {
		rest = "xxxxx" + rest[hostAt(rest):]
	} else if at >= 0 {
		if u, err := url.Parse("x://" + info + "@h"); err == nil {
			if _, has := u.User.Password(); has {
				rest = url.User(u.User.Username()).String() + ":xxxxx" + rest[at:]
			}
		}
	}
	return scheme + "://" + redactQuery(rest)
}

// userinfo returns the userinfo of rest (a URL past its "://") and the
// index of the '@' after it (-1 if there is none), and whether it is clean:
// no '@' past the hosts, and a userinfo url.Parse reads.
func userinfo(rest string) (info string, at int, clean bool) {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if strings.Contains(rest[end:], "@") {
		return "", -1, false
	}
	at = strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return "", -1, true
	}
	_, err := url.Parse("x://" + rest[:at] + "@h")
	return rest[:at], at, err == nil
}

// hostAt returns the index of the '@' that ends the userinfo of rest (a
// URL past its "://" whose userinfo is not clean), taken as the last '@'
// followed by something like hosts up to '/', '?' or the end; or of the
// last '@' if none is.
func hostAt(rest string) int {
	last := strings.LastIndexByte(rest, '@')
	for i := last; i >= 0; i = strings.LastIndexByte(rest[:i], '@') {
		if hostish(rest[i+1:]) {
			return i
		}
	}
	return last
}

// hostish reports whether s starts with hosts (host:port, comma-separated)
// and then '/', '?' or its end.
func hostish(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '/' || c == '?':
			return i > 0
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte(".-_:,[]%", c) >= 0:
		default:
			return false
		}
	}
	return len(s) > 0
}

// redactQuery replaces the values of query parameters whose names hold
// "password" in rest.
func redactQuery(rest string) string {
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		return rest
	}
	params := strings.Split(rest[q+1:], "&")
	for i, p := range params {
		if k, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
			params[i] = k + "=xxxxx"
		}
	}
	return rest[:q+1] + strings.Join(params, "&")
}

// URLFlag is a flag.Value holding a Redis URL that prints redacted, so a
// program's -h shows a default taken from REDIS_URL without its password:
//
//	u := connect.URLFlag{URL: os.Getenv("REDIS_URL")}
//	fs.Var(&u, "redis", "Redis URL")
type URLFlag struct{ URL string }

// String returns the URL redacted.
func (f *URLFlag) String() string {
	if f == nil {
		return ""
	}
	return Redact(f.URL)
}

// Set sets the URL.
func (f *URLFlag) Set(s string) error { f.URL = s; return nil }
