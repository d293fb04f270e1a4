package bucket

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
provider: s3
bucket: fleet
endpoint: 127.0.0.1:9000
region: eu-west-1
prefix: /prod/
tls:
  insecure: true
  ca_file: /etc/ca.pem
credentials:
  access_key_file: /run/ak
  secret_key_file: /run/sk
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Provider: "s3", Bucket: "fleet", Endpoint: "127.0.0.1:9000", Region: "eu-west-1", Prefix: "/prod/",
		TLS: TLS{Insecure: true, CAFile: "/etc/ca.pem"}, Credentials: Credentials{AccessKeyFile: "/run/ak", SecretKeyFile: "/run/sk"}}
	if cfg != want {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
	if got := cfg.Name(); got != "s3://fleet/prod" {
		t.Errorf("Name() = %q, want s3://fleet/prod", got)
	}
	for _, c := range []struct {
		cfg  Config
		name string
	}{
		{Config{Provider: "gcs", Bucket: "b"}, "gcs://b"},
		{Config{Provider: "azure", Bucket: "c", StorageAccount: "acct", Prefix: "p"}, "azure://acct/c/p"},
		{Config{Provider: "filesystem", Directory: "/srv/bucket"}, "filesystem:/srv/bucket"},
	} {
		if err := c.cfg.Validate(); err != nil {
			t.Errorf("%+v: %v", c.cfg, err)
		}
		if got := c.cfg.Name(); got != c.name {
			t.Errorf("Name() = %q, want %q", got, c.name)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	for _, c := range []struct{ yaml, want string }{
		{"", "empty"},
		{"bucket: b\n", "provider: missing"},
		{"provider: s4\nbucket: b\n", `provider "s4": want s3, gcs, azure, filesystem`},
		{"provider: s3\nendpoint: x:1\n", "bucket: missing"},
		{"provider: s3\nbucket: b\n", "endpoint: missing"},
		{"provider: s3\nbucket: b\nendpoint: https://x\n", "without a scheme"},
		{"provider: s3\nbukcet: b\nendpoint: x\n", `unknown key "bukcet" at line 2 (the config takes provider, bucket, endpoint`},
		{"provider: s3\nbucket: b\nendpoint: x\ntls:\n  insecur: true\n", `unknown key "tls.insecur" at line 5 (tls takes insecure, ca_file, server_name, insecure_skip_verify)`},
		{"provider: filesystem\n", "directory: missing"},
		{"provider: filesystem\ndirectory: /x\nbucket: b\n", "takes a directory"},
		{"provider: azure\nbucket: b\n", "storage_account: missing"},
		{"provider: gcs\nbucket: b\ncredentials:\n  access_key_file: /x\n  secret_key_file: /y\n", "access_key_file: not for the gcs provider"},
		{"provider: s3\nbucket: b\nendpoint: x\ncredentials:\n  access_key_file: /x\n", "go together"},
		{"provider: s3\nbucket: b\nendpoint: x\nprefix: ../up\n", "must not contain '..'"},
		{"provider: s3\nbucket: b\nendpoint: x\nsecret_key: " + secret + "\n", "line 4: secret_key: credentials are not written in the objstore config; use credentials.secret_key_file"},
		{"provider: s3\nbucket: b\nendpoint: x\ncredentials:\n  secret_key: " + secret + "\n", "credentials.secret_key: credentials are not written"},
		{"provider: s3\nbucket: [" + secret + "\n", "not YAML"},
		{"provider: s3\nbucket:\n  x: " + secret + "\n", "wrong type"},
		{"- " + secret + "\n", "wrong type"},
	} {
		_, err := ParseConfig([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error containing %q", c.yaml, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "EXAMPLEKEY") {
			t.Errorf("%q: the error shows the secret: %v", c.yaml, err)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "objstore.yaml")
	if err := os.WriteFile(path, []byte("provider: filesystem\ndirectory: "+dir+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil || cfg.Directory != dir {
		t.Fatalf("LoadConfig: %+v, %v", cfg, err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v, want an error naming it", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, maxConfigBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("provider: s3\nbucket: b\nendpoint: x:9000\nprefix: p\ntls:\n  insecure: true\n"))
	f.Add([]byte("provider: filesystem\ndirectory: /tmp/x\n"))
	f.Add([]byte("provider: azure\nbucket: c\nstorage_account: a\ncredentials:\n  account_key_file: /k\n"))
	f.Add([]byte("provider: s3\nsecret_key: hunter2hunter2\n"))
	f.Add([]byte("provider: s3\nbucket: b\nendpoint: x\ntls:\n  insecur: true\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := ParseConfig(b)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a config Validate refuses: %v", err)
		}
		if cfg.Name() == "" {
			t.Fatal("a valid config has no name")
		}
	})
}
