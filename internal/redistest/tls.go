package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLS is a redis-server that speaks TLS only, with certificates made for the
// test by a private CA; see StartTLS.
type TLS struct {
	*Server
	Dir                   string // where the PEM files are
	CA                    string // the CA's certificate
	ClientCert, ClientKey string // a client certificate the CA signed
	Mutual                bool   // the server requires a client certificate
	serverCert, serverKey string
}

// StartTLS makes a CA, a server certificate for 127.0.0.1 and a client
// certificate, and starts a server listening with TLS only; with mutual, it
// requires a client certificate (tls-auth-clients yes). Stopped when tb ends.
func StartTLS(tb testing.TB, mutual bool) *TLS {
	tb.Helper()
	t := &TLS{Dir: tb.TempDir(), Mutual: mutual}
	caKey, caCert := t.issue(tb, "ca", nil, nil)
	t.CA = filepath.Join(t.Dir, "ca.pem")
	t.serverCert, t.serverKey = t.write(tb, "server", caKey, caCert)
	t.ClientCert, t.ClientKey = t.write(tb, "client", caKey, caCert)
	auth := "no"
	if mutual {
		auth = "yes"
	}
	conf := &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "127.0.0.1"}
	conf.RootCAs.AddCert(caCert)
	pair, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
	if err != nil {
		tb.Fatal(err)
	}
	conf.Certificates = []tls.Certificate{pair}
	s, err := startAs(&Server{tls: conf, args: []string{
		"--tls-cert-file", t.serverCert, "--tls-key-file", t.serverKey,
		"--tls-ca-cert-file", t.CA, "--tls-auth-clients", auth,
	}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	t.Server = s
	return t
}

// URL returns the server's rediss:// URL in connect.URL's form: trusting
// the test's CA, and with the client certificate if the server requires one.
func (t *TLS) URL() string {
	q := url.Values{"tls_ca_file": {t.CA}}
	if t.Mutual {
		q.Set("tls_cert_file", t.ClientCert)
		q.Set("tls_key_file", t.ClientKey)
	}
	return "rediss://" + t.Addr() + "/0?" + q.Encode()
}

// issue makes a key and a certificate named name, signed by parent (self
// signed, as a CA, if parent is nil).
func (t *TLS) issue(tb testing.TB, name string, parentKey *ecdsa.PrivateKey, parent *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "redmap test " + name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		parent, parentKey = tmpl, key
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	if name == "ca" {
		t.writePEM(tb, "ca.pem", "CERTIFICATE", der)
	}
	return key, cert
}

// write issues a certificate for name and writes it and its key as PEM files.
func (t *TLS) write(tb testing.TB, name string, caKey *ecdsa.PrivateKey, ca *x509.Certificate) (certFile, keyFile string) {
	tb.Helper()
	key, cert := t.issue(tb, name, caKey, ca)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return t.writePEM(tb, name+".pem", "CERTIFICATE", cert.Raw), t.writePEM(tb, name+"-key.pem", "EC PRIVATE KEY", kb)
}

func (t *TLS) writePEM(tb testing.TB, file, kind string, der []byte) string {
	tb.Helper()
	path := filepath.Join(t.Dir, file)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Certificates makes a private CA and a certificate for 127.0.0.1 and
// localhost signed by it, as PEM files in a directory of the test's: for a
// test's own TLS server (the dashboard's, say). It returns the CA's
// certificate file and the server's certificate and key files.
func Certificates(tb testing.TB) (ca, cert, key string) {
	tb.Helper()
	t := &TLS{Dir: tb.TempDir()}
	caKey, caCert := t.issue(tb, "ca", nil, nil)
	cert, key = t.write(tb, "server", caKey, caCert)
	return filepath.Join(t.Dir, "ca.pem"), cert, key
}
