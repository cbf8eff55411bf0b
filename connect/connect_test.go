package connect_test

import (
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/internal/redistest"
)

// A URL Connect cannot use gives one line naming the part at fault, and
// never the password.
func TestConnectNamesTheBadPart(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"localhost:6379", "want redis://host:port"},
		{"http://u:secret@h:1", `scheme "http"`},
		{"redis://u:secret@h:1/0?tls_ca_file=/no/such/file", "tls_ca_file"},
		{"redis://u:secret@h:1?tls=maybe", `tls="maybe"`},
		{"redis://u:secret@h:1?cluster=maybe", `cluster="maybe"`},
		{"redis://u:secret@h:1?tls_cert_file=c.pem", "tls_cert_file and tls_key_file"},
		{"redis://u:secret@h:1/x", "x"},
		{"redis://u:secret@h:1?bogus=1", "bogus"},
		{"redis-sentinel://u:secret@h1:1,h2/0?master=m", `Sentinel address "h2"`},
		{"redis-sentinel://u:secret@h1:1", "master=NAME missing"},
		{"redis-sentinel://u:secret@h1:1?master=m&bogus=1", `"bogus"`},
		{"redis-sentinel://u:secret@h1:1/zero?master=m", `database "zero"`},
	} {
		_, err := connect.URL(c.url)
		if err == nil {
			t.Errorf("Connect(%q): no error, want one naming %q", c.url, c.want)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || strings.Contains(msg, "secret") || strings.Contains(msg, "\n") ||
			!strings.HasPrefix(msg, "connect: ") {
			t.Errorf("Connect(%q): %q; want one line starting redmap:, naming %q, without the password", c.url, msg, c.want)
		}
	}
}

// Each form gives the client of its topology, with its settings.
func TestConnectForms(t *testing.T) {
	c, err := connect.URL("redis://u:pw@h:1/2?pool_size=7")
	if cl, ok := c.(*redis.Client); err != nil || !ok || cl.Options().DB != 2 || cl.Options().PoolSize != 7 ||
		cl.Options().Password != "pw" || cl.Options().TLSConfig != nil {
		t.Fatalf("one server: %T %v", c, err)
	}
	c, err = connect.URL("redis://h:1?addr=h:2&addr=h:3")
	if cl, ok := c.(*redis.ClusterClient); err != nil || !ok || len(cl.Options().Addrs) != 3 {
		t.Fatalf("cluster: %T %v", c, err)
	}
	c, err = connect.URL("redis://h:1?cluster=true&tls=true&tls_server_name=redis.example")
	if cl, ok := c.(*redis.ClusterClient); err != nil || !ok || cl.Options().TLSConfig == nil ||
		cl.Options().TLSConfig.ServerName != "redis.example" {
		t.Fatalf("cluster over TLS: %T %v", c, err)
	}
	c, err = connect.URL("rediss://h:1")
	if cl, ok := c.(*redis.Client); err != nil || !ok || cl.Options().TLSConfig == nil || cl.Options().TLSConfig.ServerName != "h" {
		t.Fatalf("rediss: %T %v", c, err)
	}
	if _, err := connect.URL("redis-sentinel://:pw@h1:1,h2:2/3?master=m&sentinel_password=s&tls=true"); err != nil {
		t.Fatalf("sentinel: %v", err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:secret@h:1/0":                     "redis://u:xxxxx@h:1/0",
		"redis://:secret@h:1":                        "redis://:xxxxx@h:1",
		"redis-sentinel://:s@h1:1,h2:2/0?master=m":   "redis-sentinel://:xxxxx@h1:1,h2:2/0?master=m",
		"redis://h:1?addr=h:2":                       "redis://h:1?addr=h:2",
		"redis://u@h:1":                              "redis://u@h:1",
		"rediss://u:p%40ss@h:1/0?tls_ca_file=/a%40b": "rediss://u:xxxxx@h:1/0?tls_ca_file=/a%40b",
		"rediss://u:p%40ss@h:1/0?tls_ca_file=/a@b":   "rediss://xxxxx@b", // an '@' past the hosts: all redacted
	} {
		if got := connect.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// ping connects through url and runs a write and a read on keys of three
// slots, returning the first error.
func ping(url string) error {
	c, err := connect.URL(url)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if err := c.Set(ctx, "connect-test:"+k, k, 0).Err(); err != nil {
			return err
		}
		if v, err := c.Get(ctx, "connect-test:"+k).Result(); err != nil || v != k {
			return err
		}
	}
	return nil
}

// Connect reaches a Cluster, Sentinel's primary, and TLS servers with a
// private CA, with and without client certificates.
func TestConnectTopologies(t *testing.T) {
	t.Parallel()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		if err := ping(cl.URL()); err != nil {
			t.Fatalf("%s: %v", cl.URL(), err)
		}
		// One node and cluster=true find the others.
		if err := ping("redis://" + cl.Nodes[1].Addr() + "?cluster=true"); err != nil {
			t.Fatalf("one node: %v", err)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		st := redistest.StartSentinel(t)
		url := "redis-sentinel://" + strings.Join(st.Addrs(), ",") + "/0?master=" + redistest.MasterName
		if err := ping(url); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if v, _ := st.Primary(t).Client(t).Get(context.Background(), "connect-test:a").Result(); v != "a" {
			t.Fatalf("the write did not reach the primary: %q", v)
		}
	})
	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		s := redistest.StartTLS(t, false)
		if err := ping(s.URL()); err != nil {
			t.Fatalf("%s: %v", s.URL(), err)
		}
		if err := ping("rediss://" + s.Addr()); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("without the CA: %v, want a certificate error", err)
		}
	})
	t.Run("mutual-tls", func(t *testing.T) {
		t.Parallel()
		s := redistest.StartTLS(t, true)
		if err := ping(s.URL()); err != nil {
			t.Fatalf("%s: %v", s.URL(), err)
		}
		if err := ping("rediss://" + s.Addr() + "?tls_ca_file=" + s.CA); err == nil {
			t.Fatal("no client certificate: no error")
		}
	})
}

// No form connect.URL accepts, nor a malformed one, shows its password:
// neither Redact, nor URL's errors, nor a flag's -h default (issue 35:
// passwords holding '/' or '?', sentinel_password, a parse error that
// quoted one).
func TestSecretsNeverShown(t *testing.T) {
	const secret = "S3cr3t"
	for _, c := range []struct {
		url  string
		keep string // what the redacted URL still shows
	}{
		{"redis://u:" + secret + "@h:1/0", "redis://u:xxxxx@h:1/0"},
		{"redis://:" + secret + "@h:1", "redis://:xxxxx@h:1"},
		{"redis://acl-user:" + secret + "@h:1/2?pool_size=3", "redis://acl-user:xxxxx@h:1/2?pool_size=3"},
		{"rediss://u:" + secret + "@h:1/0?tls_ca_file=/etc/ca.pem&tls_cert_file=/c.pem&tls_key_file=/k.pem", "tls_key_file=/k.pem"},
		{"redis://u:a/" + secret + "@h:1/0", "@h:1/0"},
		{"redis://u:a?" + secret + "@h:1/0", "@h:1/0"},
		{"redis://u:a#" + secret + "@h:1/0", "@h:1/0"},
		{"redis://u:a@" + secret + "@h:1/0", "@h:1/0"},
		{"redis://u:a:" + secret + "@h:1/0", "@h:1/0"},
		{"redis://u:" + secret + "%2F%3F%40@h:1/0", "redis://u:xxxxx@h:1/0"},
		{"redis://u:1234?x=" + secret + "@h:1", "@h:1"},
		{"redis://u:" + secret + "@h:1?addr=h:2&addr=h:3", "addr=h:3"},
		{"redis-sentinel://:" + secret + "@h1:1,h2:2/0?master=m", "h1:1,h2:2/0?master=m"},
		{"redis-sentinel://h1:1,h2:2/0?master=m&sentinel_password=" + secret, "sentinel_password=xxxxx"},
		{"redis-sentinel://u:p@h1:1/0?sentinel_password=a/" + secret + "&master=m", "master=m"},
		{"redis-sentinel://u:a/" + secret + "@h1:1,h2:2/0?master=m", "@h1:1,h2:2/0?master=m"},
		{"u:" + secret + "@h:1", "@h:1"},
	} {
		r := connect.Redact(c.url)
		if strings.Contains(r, secret) || !strings.Contains(r, c.keep) {
			t.Errorf("Redact(%q) = %q: want no password, and %q kept", c.url, r, c.keep)
		}
		if _, err := connect.URL(c.url); err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("URL(%q): %v shows the password", c.url, err)
		}
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var out strings.Builder
		fs.SetOutput(&out)
		u := connect.URLFlag{URL: c.url}
		fs.Var(&u, "redis", "Redis URL")
		fs.PrintDefaults()
		if strings.Contains(out.String(), secret) || u.URL != c.url {
			t.Errorf("-h with default %q: %q", c.url, out.String())
		}
	}
}
