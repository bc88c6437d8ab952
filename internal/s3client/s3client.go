// Package s3client builds the S3 client every S3 user in vastrun shares
// (checkpoint storage, team state), so that they read the same standard
// AWS configuration the same way.
//
// Contract: values given in Config win; empty ones come from the
// environment (through Config.Getenv): the endpoint from
// AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (default AWS), the region from
// AWS_REGION or AWS_DEFAULT_REGION (default us-east-1), path-style
// addressing from AWS_S3_FORCE_PATH_STYLE=true or any endpoint outside
// amazonaws.com (MinIO, moto, versitygw, Ceph mostly want it), and
// credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN
// or the shared credentials file (~/.aws/credentials, AWS_PROFILE).
package s3client

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config is what a caller knows; see the package contract for the rest.
type Config struct {
	Endpoint     string
	Region       string
	PathStyle    *bool // nil: from the environment and the endpoint
	AccessKey    string
	SecretKey    string
	SessionToken string
	Getenv       func(string) string // nil: os.Getenv
	// Transport carries every request; nil: minio-go's default transport,
	// adjusted by Tune when that is set.
	Transport http.RoundTripper
	Tune      func(*http.Transport)
	// Wrap, when set, wraps the transport (a caller that watches every
	// response).
	Wrap       func(http.RoundTripper) http.RoundTripper
	MaxRetries int // 0: minio-go's default
}

// ErrEndpoint reports an endpoint that is not an http(s) URL with a host.
var ErrEndpoint = errors.New("bad S3 endpoint")

// Client is a configured client and the endpoint it talks to.
type Client struct {
	*minio.Client
	// Endpoint is scheme://host, without path or credentials.
	Endpoint string
	Secure   bool
}

// New builds a client from c.
func New(c Config) (Client, error) {
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	endpoint := first(c.Endpoint, getenv("AWS_ENDPOINT_URL_S3"), getenv("AWS_ENDPOINT_URL"), "https://s3.amazonaws.com")
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return Client{}, fmt.Errorf("S3 endpoint %q: want https://host[:port]: %w\nhint: set AWS_ENDPOINT_URL_S3, or leave it unset for AWS", endpoint, ErrEndpoint)
	}
	secure := u.Scheme == "https"
	region := first(c.Region, getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"), "us-east-1")
	pathStyle := c.PathStyle != nil && *c.PathStyle
	if c.PathStyle == nil {
		pathStyle = strings.EqualFold(getenv("AWS_S3_FORCE_PATH_STYLE"), "true") || !strings.HasSuffix(u.Host, "amazonaws.com")
	}
	lookup := minio.BucketLookupAuto
	if pathStyle {
		lookup = minio.BucketLookupPath
	}
	var creds *credentials.Credentials
	if c.AccessKey != "" {
		creds = credentials.NewStaticV4(c.AccessKey, c.SecretKey, c.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.FileAWSCredentials{Profile: getenv("AWS_PROFILE")},
		})
	}
	tr := c.Transport
	if tr == nil {
		t, err := minio.DefaultTransport(secure)
		if err != nil {
			return Client{}, fmt.Errorf("S3 client: %w", err)
		}
		if c.Tune != nil {
			c.Tune(t)
		}
		tr = t
	}
	if c.Wrap != nil {
		tr = c.Wrap(tr)
	}
	mc, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: secure, Region: region,
		BucketLookup: lookup, Transport: tr, MaxRetries: c.MaxRetries})
	if err != nil {
		return Client{}, fmt.Errorf("S3 client: %w", err)
	}
	return Client{Client: mc, Endpoint: u.Scheme + "://" + u.Host, Secure: secure}, nil
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// ErrBadKey means an object key is not a relative slash path of plain
// segments.
var ErrBadKey = errors.New("bad object key")

// CleanKey checks an object key the one way every store of vastrun takes
// them (checkpoint storage and team state, on S3 and in their directory
// stand-ins): a relative slash path with no empty, "." or ".." segment,
// so no key escapes a store's root or prefix. A leading or trailing "/"
// is refused rather than trimmed: "/a" and "a" would otherwise name one
// object, and an absolute-looking key is a caller's bug to show, not to
// paper over.
func CleanKey(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return "", fmt.Errorf("%w %q: want a relative path like runs/<id>/lease.json", ErrBadKey, key)
	}
	for _, p := range strings.Split(key, "/") {
		if p == "" || p == "." || p == ".." {
			return "", fmt.Errorf("%w %q: empty, . and .. segments are not allowed", ErrBadKey, key)
		}
	}
	return key, nil
}
