package otlpreceive

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Default addresses: the Collector's OTLP ports, on this machine only.
const (
	DefaultGRPCAddr = "127.0.0.1:4317"
	DefaultHTTPAddr = "127.0.0.1:4318"
)

// Serve serves OTLP over gRPC on grpcLn and over HTTP on httpLn (either
// may be nil), with TLS when tlsConfig is not nil, until ctx is done; it
// then stops taking requests and waits up to 10 s for those under way.
func (r *Receiver) Serve(ctx context.Context, grpcLn, httpLn net.Listener, tlsConfig *tls.Config) error {
	if grpcLn == nil && httpLn == nil {
		return errors.New("otlpreceive: nothing to serve on")
	}
	errc := make(chan error, 2)
	var gs *grpc.Server
	var hs *http.Server
	if grpcLn != nil {
		opts := r.GRPCServerOptions()
		if tlsConfig != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
		}
		gs = grpc.NewServer(opts...)
		r.RegisterGRPC(gs)
		go func() { errc <- wrap("gRPC", gs.Serve(grpcLn)) }()
	}
	if httpLn != nil {
		hs = &http.Server{Handler: r.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
			IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		if tlsConfig != nil {
			hs.TLSConfig = tlsConfig
			httpLn = tls.NewListener(httpLn, tlsConfig)
		}
		go func() { errc <- wrap("HTTP", hs.Serve(httpLn)) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if hs != nil {
		hs.Shutdown(sctx)
	}
	if gs != nil {
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-sctx.Done():
			gs.Stop()
		}
	}
	return err
}

func wrap(proto string, err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return fmt.Errorf("OTLP %s server: %w", proto, err)
}
