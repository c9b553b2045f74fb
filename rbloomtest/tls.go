package rbloomtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbloom/rbloom/internal/redisserver"
)

// TLSServer is a redis-server started by StartTLSRedis: it accepts TLS
// connections only.
type TLSServer struct {
	Addr    string         // "127.0.0.1:port", TLS only
	RootCAs *x509.CertPool // trusts the server's certificate
	CAFile  string         // the CA certificate, PEM (for SSL_CERT_FILE, say)
}

// StartTLSRedis makes a CA and a certificate for 127.0.0.1 signed by it,
// and starts redis-server with --port 0 and --tls-port on a free port,
// without client certificates; args come after. The server is killed when
// the test ends. It skips (or fails, under CI) like StartRedis.
func StartTLSRedis(t testing.TB, args ...string) *TLSServer {
	t.Helper()
	bin := lookRedisServer(t)
	dir := t.TempDir()
	s := &TLSServer{RootCAs: x509.NewCertPool(), CAFile: filepath.Join(dir, "ca.crt")}
	caCert, caKey := makeCert(t, nil, nil, s.CAFile, "")
	s.RootCAs.AddCert(caCert)
	certFile, keyFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	makeCert(t, caCert, caKey, certFile, keyFile)

	srv, err := redisserver.Start(context.Background(), redisserver.Options{
		Bin: bin,
		Dir: dir,
		TLS: &tls.Config{RootCAs: s.RootCAs},
		Args: append([]string{
			"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", s.CAFile,
			"--tls-auth-clients", "no",
		}, args...),
	})
	if err != nil {
		if !hasOpenSSL(bin) {
			msg := fmt.Sprintf("%s was built without TLS (it does not link OpenSSL; build it with BUILD_TLS=yes), and it did not start with --tls-port: %v", bin, err)
			// CI installs Debian's redis-server, which has TLS: there a
			// server that does not start with TLS is a failure.
			if os.Getenv("CI") != "" && isDebianServer(bin) {
				t.Fatal(msg + " ($CI is set and this is Debian's redis-server, so this is a failure, not a skip)")
			}
			t.Skip(msg + ": skipping the TLS test")
		}
		t.Fatalf("redis-server with TLS: %v", err)
	}
	t.Cleanup(srv.Stop)
	s.Addr = srv.Addr()
	return s
}

// makeCert writes a certificate (PEM) to certFile and its key to keyFile
// and returns them: a self-signed CA when parent is nil, else a server
// certificate for 127.0.0.1 and localhost signed by parent. Both ECDSA
// P-256, valid for a day.
func makeCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	if parent == nil {
		tmpl.Subject = pkix.Name{CommonName: "rbloom test CA"}
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.Subject = pkix.Name{CommonName: "127.0.0.1"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if keyFile != "" {
		pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key
}

// hasOpenSSL reports whether the redis-server at bin links OpenSSL, as a
// build with TLS does (Debian's, and BUILD_TLS=yes): its symbols name
// SSL_CTX_new. It is asked only after a server failed to start with TLS,
// to tell a server without TLS (a skip) from a broken start (a failure).
func hasOpenSSL(bin string) bool {
	b, err := os.ReadFile(bin)
	return err != nil || bytes.Contains(b, []byte("SSL_CTX_new")) // unreadable: assume TLS, and fail
}

// isDebianServer reports whether bin is the redis-server of Debian's
// package (/usr/bin/redis-server, a link to /usr/bin/redis-check-rdb).
func isDebianServer(bin string) bool {
	real, err := filepath.EvalSymlinks(bin)
	return err == nil && strings.HasPrefix(real, "/usr/bin/")
}
