package auth

import (
	"crypto/x509"
	"fmt"
)

// FromCertificate returns the principal a verified client certificate
// names. Its Name is the first of, in this order:
//   - the first URI SAN (e.g. a SPIFFE ID, spiffe://example.org/gateway),
//   - the first DNS SAN,
//   - the first email SAN,
//   - the subject's common name;
//
// its Groups are the subject's organizations (O=), as Kubernetes reads
// client certificates. Method is "mtls". A certificate naming nobody (or
// "anonymous") is an error.
//
// The caller must have verified the certificate (the TLS handshake did,
// against --client-ca): this function trusts what it reads.
func FromCertificate(c *x509.Certificate) (Principal, error) {
	var name string
	switch {
	case len(c.URIs) > 0:
		name = c.URIs[0].String()
	case len(c.DNSNames) > 0:
		name = c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		name = c.EmailAddresses[0]
	default:
		name = c.Subject.CommonName
	}
	if err := checkName(name); err != nil {
		return Principal{}, fmt.Errorf("the client certificate names no usable identity (URI, DNS or email SAN, or subject CN): %w", err)
	}
	return Principal{Name: name, Groups: append([]string(nil), c.Subject.Organization...), Method: "mtls"}, nil
}
