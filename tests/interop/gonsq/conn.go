package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"

	"github.com/nsqio/go-nsq"
)

// connOptions are the connection-upgrade and AUTH flags that pub and sub share.
type connOptions struct {
	tls          bool
	tlsCA        string
	tlsCert      string
	tlsKey       string
	snappy       bool
	deflate      bool
	deflateLevel int
	authSecret   string
}

// addConnFlags registers -tls, -tls-ca, -tls-cert, -tls-key, -snappy, -deflate,
// -deflate-level and -auth-secret on fs.
func addConnFlags(fs *flag.FlagSet) *connOptions {
	o := &connOptions{}
	fs.BoolVar(&o.tls, "tls", false, "negotiate TLS (tls_v1); the server certificate is not verified unless -tls-ca")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM file of the CA that signed the server certificate (verify it)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "client certificate PEM file (with -tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "client private key PEM file")
	fs.BoolVar(&o.snappy, "snappy", false, "negotiate snappy compression")
	fs.BoolVar(&o.deflate, "deflate", false, "negotiate deflate compression")
	fs.IntVar(&o.deflateLevel, "deflate-level", 6, "deflate level to ask for (1-9)")
	fs.StringVar(&o.authSecret, "auth-secret", "", "secret sent with AUTH when nsqd requires it")
	return o
}

// apply sets the options on a go-nsq config.
func (o *connOptions) apply(cfg *nsq.Config) error {
	if o.tls {
		tc := &tls.Config{InsecureSkipVerify: true}
		if o.tlsCA != "" {
			pem, err := os.ReadFile(o.tlsCA)
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("no certificate in %s", o.tlsCA)
			}
			tc = &tls.Config{RootCAs: pool}
		}
		if o.tlsCert != "" {
			cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
			if err != nil {
				return err
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cfg.TlsV1 = true
		cfg.TlsConfig = tc
	}
	cfg.Snappy = o.snappy
	cfg.Deflate = o.deflate
	if o.deflate {
		cfg.DeflateLevel = o.deflateLevel
	}
	cfg.AuthSecret = o.authSecret
	return cfg.Validate()
}
