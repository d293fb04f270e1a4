package otlpreceive

import (
	"context"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	_ "github.com/heatscope/heatscope/internal/grpcgzip" // the Collector's exporters compress with gzip by default
)

// GRPCServerOptions are the options a gRPC server serving this receiver
// needs: the size limit on a request (uncompressed), the token, and the
// bound on requests read at once, checked before a request is read.
func (r *Receiver) GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(r.opts.MaxRequestBytes),
		grpc.InTapHandle(r.tap),
		grpc.UnaryInterceptor(r.intercept),
	}
}

// RegisterGRPC registers the OTLP profiles service on s, which was made
// with GRPCServerOptions.
func (r *Receiver) RegisterGRPC(s *grpc.Server) {
	pprofileotlp.RegisterGRPCServer(s, &grpcService{r: r})
}

// tap refuses a request before its message is read when the token is
// wrong or the receiver is reading as many requests as it may.
func (r *Receiver) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if !r.authorized(first(md.Get("authorization"))) {
		e := r.refuse(refUnauthenticated, "unauthorized: send the token as the metadata \"authorization: Bearer TOKEN\"")
		r.count(e, peerOf(ctx))
		return ctx, status.Error(codes.Unauthenticated, e.msg)
	}
	if len(r.inflight) >= cap(r.inflight) {
		e := r.refuse(refBusy, "the receiver is reading %d requests already: retry later", cap(r.inflight))
		r.count(e, peerOf(ctx))
		return ctx, grpcError(e)
	}
	return ctx, nil
}

// intercept holds an in-flight slot while a request is handled.
func (r *Receiver) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	release, busy := r.acquire()
	if busy != nil {
		r.count(busy, peerOf(ctx))
		return nil, grpcError(busy)
	}
	defer release()
	return handler(ctx, req)
}

type grpcService struct {
	*pprofileotlp.UnimplementedGRPCServer
	r *Receiver
}

// Export ingests one request.
func (s *grpcService) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	res, e := s.r.ingest(ctx, req.Profiles())
	if e != nil {
		s.r.count(e, peerOf(ctx))
		return pprofileotlp.NewExportResponse(), grpcError(e)
	}
	return res.response(), nil
}

// grpcError is a refusal as a gRPC status; one to retry carries RetryInfo,
// which the Collector's exporters wait for.
func grpcError(e *refusal) error {
	_, code := httpStatus(e)
	st := status.New(code, e.msg)
	if e.retryAfter > 0 {
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(e.retryAfter)}); err == nil {
			st = d
		}
	}
	return st.Err()
}

func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr.String()
	}
	return ""
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
