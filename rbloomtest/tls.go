package rbloomtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

	for attempt := 0; ; attempt++ {
		stop, log, err := launchTLSRedis(bin, dir, s, certFile, keyFile, attempt, args)
		if err == nil {
			t.Cleanup(stop)
			return s
		}
		if !strings.Contains(log, "Address already in use") || attempt == 4 {
			t.Fatalf("redis-server with TLS: %v; its log:\n%s", err, log)
		}
	}
}

// launchTLSRedis makes one attempt of StartTLSRedis, on a free port that
// it sets in s.Addr. On failure the server is gone and log is its log.
func launchTLSRedis(bin, dir string, s *TLSServer, certFile, keyFile string, attempt int, args []string) (stop func(), log string, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	s.Addr = l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(s.Addr)
	logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, append([]string{"--port", "0", "--tls-port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", s.CAFile,
		"--tls-auth-clients", "no"}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop = func() { cmd.Process.Kill(); <-exited }
	readLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if tlsPing(s.Addr, s.RootCAs) {
			return stop, "", nil
		}
		select {
		case <-exited:
			return nil, readLog(), errors.New("redis-server exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	return nil, readLog(), errors.New("no answer over TLS within 10s")
}

// tlsPing reports whether a TLS server at addr, verified with roots,
// answers PING (or NOAUTH).
func tlsPing(addr string, roots *x509.CertPool) bool {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	return strings.HasPrefix(string(buf[:n]), "+PONG") || strings.HasPrefix(string(buf[:n]), "-NOAUTH")
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
