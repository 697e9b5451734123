package wire

import (
	"context"

	"google.golang.org/grpc"
	protobuf "google.golang.org/protobuf/proto"
)

// codecKey marks the context of a server call whose messages go through
// Codec. The key is unexported, so only [WithCodec] can set it.
type codecKey struct{}

// WithCodec returns ctx marked as the context of a server call whose
// server forces Codec (grpc.ForceServerCodecV2(wire.Codec)): internal/rpc
// marks every call's context as the call starts (in its tap handle, so
// the mark is on the stream's own context and survives any wrapping of
// the stream by interceptors). Only a server that really forces Codec may
// mark its calls: [Send] trusts the mark.
func WithCodec(ctx context.Context) context.Context {
	return context.WithValue(ctx, codecKey{}, true)
}

// HasCodec reports whether ctx was marked by [WithCodec].
func HasCodec(ctx context.Context) bool {
	return ctx.Value(codecKey{}) != nil
}

// Send sends m on a server stream with its large bytes fields by reference
// (see [ByRef]) when the stream's codec is Codec, and calls done once gRPC
// no longer needs m's values. On any other server (a plain
// grpc.NewServer(), whose proto codec knows nothing of ByRef and would
// fail with "message is wire.ByRef") m is sent as it is: that codec copies
// the message before SendMsg returns, so done is called then, whether the
// send succeeded or not.
//
// As with ByRef, done may not be called when the send fails on Codec's
// path (the message is never written out): callers that must release
// something release it at the stream's end too, idempotently. done may
// be nil.
//
// The stream is a server stream: a client stream's context may carry the
// mark of the server call that opened it while its own connection uses
// another codec.
func Send(s grpc.ServerStream, m protobuf.Message, done func()) error {
	if HasCodec(s.Context()) {
		return s.SendMsg(ByRef{Msg: m, Done: done})
	}
	err := s.SendMsg(m)
	if done != nil {
		done()
	}
	return err
}
