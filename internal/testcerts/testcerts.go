// Package testcerts makes certificate authorities and certificates for
// tests of TLS and mTLS: real X.509 (ECDSA P-256), written as PEM files
// where the servers and clients under test read them.
//
//	ca := testcerts.NewCA(t, "test CA")
//	srv := ca.Issue(t, testcerts.Server("127.0.0.1", "localhost"))
//	certFile, keyFile := srv.Write(t, t.TempDir())
package testcerts

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
	"sync/atomic"
	"testing"
	"time"
)

// serials makes every certificate's serial number unique within a test
// binary, so tests can tell certificates apart by it.
var serials atomic.Int64

func init() { serials.Store(time.Now().UnixNano() & 0xffffffff) }

// CA is a certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// Cert is a certificate and its key, PEM-encoded.
type Cert struct {
	Leaf            *x509.Certificate
	CertPEM, KeyPEM []byte
}

// Template describes a certificate to issue.
type Template struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	ExtUsage   []x509.ExtKeyUsage
	URIs       []*url.URL // URI SANs
	Emails     []string   // email SANs
	Orgs       []string   // the subject's O=; nil: "zarrgate tests"
	NotBefore  time.Time  // zero: an hour ago
	NotAfter   time.Time  // zero: in a day
}

// Server is the template of a server certificate for the hosts (IP
// addresses or DNS names), also usable as a client certificate.
func Server(hosts ...string) Template {
	t := Template{CommonName: "server", ExtUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			t.IPs = append(t.IPs, ip)
		} else {
			t.DNSNames = append(t.DNSNames, h)
		}
	}
	if len(hosts) > 0 {
		t.CommonName = hosts[0]
	}
	return t
}

// Client is the template of a client certificate for name.
func Client(name string) Template {
	return Template{CommonName: name, DNSNames: []string{name}, ExtUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// NewCA makes a self-signed CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serials.Add(1)),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"zarrgate tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue signs a certificate made from tmpl.
func (ca *CA) Issue(t testing.TB, tmpl Template) *Cert {
	t.Helper()
	key := newKey(t)
	nb, na := tmpl.NotBefore, tmpl.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour)
	}
	if na.IsZero() {
		na = time.Now().Add(24 * time.Hour)
	}
	orgs := tmpl.Orgs
	if orgs == nil {
		orgs = []string{"zarrgate tests"}
	}
	c := &x509.Certificate{
		SerialNumber:   big.NewInt(serials.Add(1)),
		Subject:        pkix.Name{CommonName: tmpl.CommonName, Organization: orgs},
		URIs:           tmpl.URIs,
		EmailAddresses: tmpl.Emails,
		DNSNames:       tmpl.DNSNames,
		IPAddresses:    tmpl.IPs,
		NotBefore:      nb,
		NotAfter:       na,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    tmpl.ExtUsage,
	}
	der, err := x509.CreateCertificate(rand.Reader, c, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Cert{
		Leaf:    leaf,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// WriteCA writes the CA's certificate to dir/name and returns its path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Write writes the certificate and key to dir/cert.pem and dir/key.pem
// (replacing them atomically, by rename, if they exist) and returns their
// paths.
func (c *Cert) Write(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	return c.WriteAs(t, dir, "cert.pem", "key.pem")
}

// WriteAs is Write with the files' names.
func (c *Cert) WriteAs(t testing.TB, dir, certName, keyName string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, certName), filepath.Join(dir, keyName)
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{certFile, c.CertPEM, 0o644}, {keyFile, c.KeyPEM, 0o600}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// TLS is the certificate as a tls.Certificate.
func (c *Cert) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	tc, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
