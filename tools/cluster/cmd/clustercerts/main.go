// Command clustercerts writes the local control plane's keys and certificates into a
// directory (Go's standard library only, so `make cluster-up` needs no openssl):
//
//	ca.crt, ca.key              the cluster CA (signs the two certificates below)
//	apiserver.crt, .key         kube-apiserver's serving certificate: 127.0.0.1, localhost
//	                            and the names in-cluster clients use for the API server
//	admin.crt, admin.key        a client certificate in group system:masters (kubeconfig)
//	apiserver-kubelet-client.*  what kube-apiserver shows a kubelet (logs, exec, port-forward)
//	sa.key, sa.pub              the service-account token signing key pair
//	webhook.crt, webhook.key    a serving certificate for 127.0.0.1 and localhost: the local
//	                            admission webhooks' (Kueue's), which the API server calls on loopback
//
// Existing files are kept: a running cluster's credentials never change under it. A leaf that
// a directory made by an older clustercerts lacks (webhook) is added, signed by its CA.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity is long enough for any test run, short enough to be plainly a local cluster.
const validity = 365 * 24 * time.Hour

func main() {
	dir := flag.String("dir", "", "directory to write into (created if absent)")
	serviceIP := flag.String("service-ip", "10.96.0.1", "the kubernetes Service's cluster IP (first of the service range)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: clustercerts -dir DIR [-service-ip IP]")
		os.Exit(2)
	}
	if err := write(*dir, net.ParseIP(*serviceIP)); err != nil {
		fmt.Fprintln(os.Stderr, "clustercerts:", err)
		os.Exit(1)
	}
}

func write(dir string, serviceIP net.IP) error {
	if _, err := os.Stat(filepath.Join(dir, "ca.crt")); err == nil {
		return addWebhookLeaf(dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, err := newKey()
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour) // clock skew between processes is harmless
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "torchdag-local-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	leaves := []struct {
		name string
		tmpl x509.Certificate
	}{
		{"apiserver", x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, serviceIP},
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"},
		}},
		{"apiserver-kubelet-client", x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		{"admin", x509.Certificate{
			Subject:     pkix.Name{CommonName: "torchdag-admin", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	}
	for i, leaf := range leaves {
		key, err := newKey()
		if err != nil {
			return err
		}
		tmpl := leaf.tmpl
		tmpl.SerialNumber = big.NewInt(int64(i + 2))
		tmpl.NotBefore, tmpl.NotAfter = now, now.Add(validity)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writePair(dir, leaf.name, der, key); err != nil {
			return err
		}
	}
	saKey, err := newKey()
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub); err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	if err := issue(dir, "webhook", webhookLeaf(), ca, caKey); err != nil {
		return err
	}
	// The CA last: its presence is what marks the directory complete.
	if err := writeKey(filepath.Join(dir, "ca.key"), caKey); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "ca.crt"), "CERTIFICATE", caDER)
}

// webhookLeaf is what an admission webhook server on loopback shows the API server, which
// calls it by a `url:` of https://127.0.0.1:PORT (there is no Service network to route a
// `service:` reference here).
func webhookLeaf() x509.Certificate {
	return x509.Certificate{
		Subject:      pkix.Name{CommonName: "torchdag-local-webhook"},
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
}

// addWebhookLeaf issues webhook.crt with the directory's CA unless it is there already.
func addWebhookLeaf(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "webhook.crt")); err == nil {
		return nil
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return err
	}
	caBlock, _ := pem.Decode(caPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if caBlock == nil || keyBlock == nil {
		return fmt.Errorf("%s: ca.crt or ca.key is not PEM", dir)
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return err
	}
	parsed, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		return err
	}
	caKey, ok := parsed.(crypto.Signer)
	if !ok {
		return fmt.Errorf("%s: ca.key is not a signing key", dir)
	}
	return issue(dir, "webhook", webhookLeaf(), ca, caKey)
}

// issue signs one leaf with the CA and writes NAME.crt and NAME.key.
func issue(dir, name string, tmpl x509.Certificate, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	tmpl.NotBefore, tmpl.NotAfter = now, now.Add(validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	return writePair(dir, name, der, key)
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func writePair(dir, name string, der []byte, key crypto.Signer) error {
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
