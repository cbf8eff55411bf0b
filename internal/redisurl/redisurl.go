// Package redisurl parses the parts of Redis URLs that go-redis does not:
// Sentinel's host lists and TLS files (see connect.URL). Its errors name
// the part at fault; connect.URL adds the URL, without its password.
package redisurl

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel parses redis-sentinel://[user:password@]host:port,...[/db]?master=NAME.
// Its host list is not one URL host, so it is cut by hand.
func Sentinel(rawURL string) (*redis.FailoverOptions, error) {
	rest := strings.TrimPrefix(rawURL, "redis-sentinel://")
	rest, rawQuery, _ := strings.Cut(rest, "?")
	rest, path, _ := strings.Cut(rest, "/")
	opts := &redis.FailoverOptions{}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		info, err := url.Parse("x://" + rest[:at+1] + "h")
		if err != nil {
			return nil, fmt.Errorf("user and password: %w", Cause(err))
		}
		opts.Username = info.User.Username()
		opts.Password, _ = info.User.Password()
		rest = rest[at+1:]
	}
	for _, addr := range strings.Split(rest, ",") {
		if _, port, ok := strings.Cut(addr, ":"); !ok || port == "" {
			return nil, fmt.Errorf("Sentinel address %q: want host:port", addr)
		}
		opts.SentinelAddrs = append(opts.SentinelAddrs, addr)
	}
	if path != "" {
		db, err := strconv.Atoi(path)
		if err != nil || db < 0 {
			return nil, fmt.Errorf("database %q: want a number", path)
		}
		opts.DB = db
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	opts.MasterName = q.Get("master")
	if opts.MasterName == "" {
		return nil, errors.New("master=NAME missing: the name Sentinel knows the primary by")
	}
	opts.SentinelPassword = q.Get("sentinel_password")
	q.Del("master")
	q.Del("sentinel_password")
	host, _, _ := strings.Cut(opts.SentinelAddrs[0], ":")
	if opts.TLSConfig, err = TLS(q, false, host); err != nil {
		return nil, err
	}
	for k := range q {
		return nil, fmt.Errorf("query parameter %q: unknown here (master, sentinel_password, tls, tls_ca_file, tls_cert_file, tls_key_file, tls_server_name)", k)
	}
	return opts, nil
}

// TLS takes the TLS parameters out of q and returns the configuration
// they ask for: nil if TLS is off (on says the scheme turns it on).
func TLS(q url.Values, on bool, host string) (*tls.Config, error) {
	ca, cert, key, name := q.Get("tls_ca_file"), q.Get("tls_cert_file"), q.Get("tls_key_file"), q.Get("tls_server_name")
	flag := q.Get("tls")
	for _, k := range []string{"tls", "tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name"} {
		q.Del(k)
	}
	if flag != "" {
		b, err := strconv.ParseBool(flag)
		if err != nil {
			return nil, fmt.Errorf("tls=%q: want true or false", flag)
		}
		on = on || b
	}
	if !on && ca == "" && cert == "" && key == "" && name == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if name != "" {
		c.ServerName = name
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("tls_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca_file %s: no PEM certificate in it", ca)
		}
		c.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("tls_cert_file and tls_key_file: give both or neither")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("tls_cert_file and tls_key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// Cause returns what a *url.Error says is wrong, without the URL, which
// may hold a password.
func Cause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
