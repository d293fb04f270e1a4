// Package benchminio runs a real MinIO for the benchmarks (bench/fleet,
// bench/overview):
// the server binary internal/miniotest finds, on a free loopback port, its
// data and credential files in a directory of the caller's, one bucket.
package benchminio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/heatscope/heatscope/bucket"
	"github.com/heatscope/heatscope/internal/miniotest"
)

// Server is a running MinIO.
type Server struct {
	// Endpoint is host:port on 127.0.0.1; Bucket the bucket Start made.
	Endpoint, Bucket string
	dir              string
	cmd              *exec.Cmd
}

// Start starts MinIO with its data and credentials under dir and makes
// bucketName, waiting up to a minute for the server to answer.
func Start(dir, bucketName string) (*Server, error) {
	bin, err := miniotest.Binary()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &Server{Endpoint: fmt.Sprintf("127.0.0.1:%d", ports[0]), Bucket: bucketName, dir: dir}
	user, password := "bench"+randomHex(6), randomHex(16)
	for name, v := range map[string]string{"access-key": user, "secret-key": password} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			return nil, err
		}
	}
	log, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	s.cmd = exec.Command(bin, "server", filepath.Join(dir, "data"), "--address", s.Endpoint,
		"--console-address", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--quiet")
	s.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+user, "MINIO_ROOT_PASSWORD="+password, "MINIO_BROWSER=off")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start minio: %w", err)
	}
	mc, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(user, password, "")})
	if err != nil {
		s.Stop()
		return nil, err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = mc.MakeBucket(ctx, bucketName, minio.MakeBucketOptions{})
		cancel()
		if err == nil || minio.ToErrorResponse(err).Code == "BucketAlreadyOwnedByYou" {
			// (A try that timed out may have made it.)
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("minio did not start: %w (log: %s)", err, log.Name())
		}
	}
}

// Config is the objstore configuration of the bucket under prefix.
func (s *Server) Config(prefix string) bucket.Config {
	return bucket.Config{Provider: "s3", Bucket: s.Bucket, Endpoint: s.Endpoint, Prefix: prefix, TLS: bucket.TLS{Insecure: true},
		Credentials: bucket.Credentials{AccessKeyFile: filepath.Join(s.dir, "access-key"), SecretKeyFile: filepath.Join(s.dir, "secret-key")}}
}

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
