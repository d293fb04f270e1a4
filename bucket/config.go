// Package bucket opens the object storage a fleet of recorders ships its
// blocks to: an S3-compatible service (AWS S3, MinIO, Ceph), Google Cloud
// Storage and Azure Blob Storage (with the gcs and azure build tags), or a
// local directory. It reads heatscope's
// own objstore config file and returns a client over
// github.com/thanos-io/objstore whose errors name the bucket and the
// operation and never carry a credential.
package bucket

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Providers are the object stores a config may name.
var Providers = []string{"s3", "gcs", "azure", "filesystem"}

// maxConfigBytes bounds a config file: it is a few lines.
const maxConfigBytes = 1 << 20

// Config is an objstore config file:
//
//	provider: s3              # s3, gcs, azure or filesystem
//	bucket: heatscope         # the bucket (azure: the container)
//	endpoint: s3.eu-west-1.amazonaws.com   # s3: host[:port]; azure: the endpoint suffix
//	region: eu-west-1
//	prefix: prod              # optional: every object is under prefix/
//	tls:
//	  insecure: false         # s3: plain HTTP (a MinIO on loopback)
//	  ca_file: /etc/heatscope/ca.pem
//	credentials:              # optional; see Credentials
//	  access_key_file: /etc/heatscope/s3/access-key
//	  secret_key_file: /etc/heatscope/s3/secret-key
//
// Credentials are never written in the file itself: they come from the
// environment, from files it names, or from the instance's role.
type Config struct {
	Provider string `yaml:"provider"`
	Bucket   string `yaml:"bucket"`
	Endpoint string `yaml:"endpoint"`
	Region   string `yaml:"region"`
	Prefix   string `yaml:"prefix"`
	// Directory is the filesystem provider's root (it has no bucket).
	Directory string `yaml:"directory"`
	// StorageAccount is Azure's storage account.
	StorageAccount string      `yaml:"storage_account"`
	TLS            TLS         `yaml:"tls"`
	Credentials    Credentials `yaml:"credentials"`
}

// TLS configures the connection to the object store.
type TLS struct {
	// Insecure talks plain HTTP to an s3 endpoint (a MinIO on loopback).
	Insecure bool `yaml:"insecure"`
	// CAFile is a PEM file of the certificate authorities to trust.
	CAFile string `yaml:"ca_file"`
	// ServerName overrides the name the server's certificate must carry.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any certificate (testing only).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Credentials name files that hold secrets. Left empty, each provider
// falls back to its environment and instance role:
//
//   - s3: $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY (and
//     $AWS_SESSION_TOKEN), then ~/.aws/credentials, then the instance's
//     IAM role (EC2 instance profile, EKS IRSA).
//   - gcs: $GOOGLE_APPLICATION_CREDENTIALS, then the metadata server.
//   - azure: $AZURE_STORAGE_ACCOUNT_KEY, then a managed or workload
//     identity.
type Credentials struct {
	AccessKeyFile      string `yaml:"access_key_file"`      // s3
	SecretKeyFile      string `yaml:"secret_key_file"`      // s3
	SessionTokenFile   string `yaml:"session_token_file"`   // s3, optional
	ServiceAccountFile string `yaml:"service_account_file"` // gcs: a service account's JSON key
	AccountKeyFile     string `yaml:"account_key_file"`     // azure: the storage account key
}

// secretKeys are keys people write by habit (Thanos' config has them);
// heatscope refuses them with the way to do it instead.
var secretKeys = map[string]string{
	"access_key":          "credentials.access_key_file or $AWS_ACCESS_KEY_ID",
	"secret_key":          "credentials.secret_key_file or $AWS_SECRET_ACCESS_KEY",
	"session_token":       "credentials.session_token_file or $AWS_SESSION_TOKEN",
	"service_account":     "credentials.service_account_file or $GOOGLE_APPLICATION_CREDENTIALS",
	"storage_account_key": "credentials.account_key_file or $AZURE_STORAGE_ACCOUNT_KEY",
	"account_key":         "credentials.account_key_file or $AZURE_STORAGE_ACCOUNT_KEY",
}

// LoadConfig reads and checks an objstore config file.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("objstore config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("objstore config %s: %w", path, err)
	}
	if len(b) > maxConfigBytes {
		return Config{}, fmt.Errorf("objstore config %s: larger than %d bytes", path, maxConfigBytes)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("objstore config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses and checks an objstore config. Unknown keys are
// errors that name them; a secret written in the file is refused (the
// error names the key, never its value).
func ParseConfig(b []byte) (Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return Config{}, fmt.Errorf("not YAML: %s", scrubYAMLError(err))
	}
	if len(doc.Content) == 0 {
		return Config{}, errors.New("empty: want at least provider and bucket")
	}
	if err := refuseSecrets(doc.Content[0], ""); err != nil {
		return Config{}, err
	}
	if err := refuseUnknownKeys(doc.Content[0], reflect.TypeFor[Config](), ""); err != nil {
		return Config{}, err
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, errors.New(scrubYAMLError(err))
	}
	return cfg, cfg.Validate()
}

// scrubYAMLError keeps a YAML error's position and drops what it quotes
// of the file, which might be a secret pasted in the wrong place.
func scrubYAMLError(err error) string {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var lines []string
		for _, e := range te.Errors {
			if i := strings.Index(e, ": cannot unmarshal"); i >= 0 {
				lines = append(lines, e[:i]+": wrong type")
			} else {
				lines = append(lines, e)
			}
		}
		return strings.Join(lines, "; ")
	}
	if i := strings.Index(msg, "`"); i >= 0 {
		msg = msg[:i] + "(value not shown)"
	}
	return msg
}

// refuseSecrets fails on a key of secretKeys anywhere in the document.
func refuseSecrets(n *yaml.Node, path string) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if instead, ok := secretKeys[k.Value]; ok {
			return fmt.Errorf("line %d: %s%s: credentials are not written in the objstore config; use %s", k.Line, path, k.Value, instead)
		}
		if err := refuseSecrets(n.Content[i+1], path+k.Value+"."); err != nil {
			return err
		}
	}
	return nil
}

// refuseUnknownKeys fails on the first key of n that t (a struct of yaml
// tags) does not have, naming it, its line and the keys its section takes.
// A value of the wrong kind is left to the decoder.
func refuseUnknownKeys(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct {
		return nil
	}
	fields := map[string]reflect.Type{}
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		fields[name] = t.Field(i).Type
		names = append(names, name)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		ft, ok := fields[k.Value]
		if !ok {
			section := "the config"
			if path != "" {
				section = strings.TrimSuffix(path, ".")
			}
			return fmt.Errorf("unknown key %q at line %d (%s takes %s)", path+k.Value, k.Line, section, strings.Join(names, ", "))
		}
		if err := refuseUnknownKeys(n.Content[i+1], ft, path+k.Value+"."); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks that the config names a provider and what it needs.
func (c Config) Validate() error {
	switch c.Provider {
	case "":
		return fmt.Errorf("provider: missing (want %s)", strings.Join(Providers, ", "))
	case "filesystem":
		if c.Directory == "" {
			return errors.New("directory: missing (the filesystem provider's root)")
		}
		if c.Bucket != "" || c.Endpoint != "" {
			return errors.New("the filesystem provider takes a directory, not a bucket or endpoint")
		}
	case "s3", "gcs", "azure":
		if c.Bucket == "" {
			return fmt.Errorf("bucket: missing (the %s bucket to use)", c.Provider)
		}
		if c.Directory != "" {
			return fmt.Errorf("directory: only for the filesystem provider, not %s", c.Provider)
		}
	default:
		return fmt.Errorf("provider %q: want %s", c.Provider, strings.Join(Providers, ", "))
	}
	if c.Provider == "s3" && c.Endpoint == "" {
		return errors.New("endpoint: missing (s3.<region>.amazonaws.com for AWS, host:port for MinIO)")
	}
	if c.Provider == "s3" && strings.Contains(c.Endpoint, "://") {
		return fmt.Errorf("endpoint %q: give host[:port] without a scheme (tls.insecure: true for plain HTTP)", c.Endpoint)
	}
	if c.Provider == "azure" && c.StorageAccount == "" {
		return errors.New("storage_account: missing (the Azure storage account)")
	}
	cr := c.Credentials
	if (cr.AccessKeyFile == "") != (cr.SecretKeyFile == "") {
		return errors.New("credentials: access_key_file and secret_key_file go together")
	}
	if cr.SessionTokenFile != "" && cr.AccessKeyFile == "" {
		return errors.New("credentials: session_token_file needs access_key_file and secret_key_file")
	}
	for name, set := range map[string]bool{
		"access_key_file":      cr.AccessKeyFile != "" && c.Provider != "s3",
		"service_account_file": cr.ServiceAccountFile != "" && c.Provider != "gcs",
		"account_key_file":     cr.AccountKeyFile != "" && c.Provider != "azure",
	} {
		if set {
			return fmt.Errorf("credentials.%s: not for the %s provider", name, c.Provider)
		}
	}
	if c.Provider == "filesystem" && (c.TLS != TLS{}) {
		return errors.New("tls: not for the filesystem provider")
	}
	if strings.Contains(c.Prefix, "..") {
		return fmt.Errorf("prefix %q: must not contain '..'", c.Prefix)
	}
	return nil
}

// Name is how messages name the bucket: provider, bucket and prefix
// (never a credential).
func (c Config) Name() string {
	var s string
	switch c.Provider {
	case "filesystem":
		s = "filesystem:" + c.Directory
	case "azure":
		s = "azure://" + c.StorageAccount + "/" + c.Bucket
	default:
		s = c.Provider + "://" + c.Bucket
	}
	if p := strings.Trim(c.Prefix, "/"); p != "" {
		s += "/" + p
	}
	return s
}
