package remote_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

	"github.com/zarrgate/zarrgate/codecsvc/remote/remotetest"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// BenchmarkTransportFloor is what moving 256 KiB to a peer and 256 KiB
// back costs on this machine with nothing else done, the floor under
// BenchmarkOffloadOverhead's added cost per chunk: CPU time of the whole
// process (both ends) and wall-clock time per 256 KiB each way, over
// loopback TCP and a unix socket, first as plain socket writes and reads
// (the kernel's two copies each way), then as a gRPC bidirectional stream
// with the codec tier's options (internal/rpc) and a codec that neither
// marshals nor gathers (HTTP/2 framing and gRPC's own buffers only). Each
// message is 256 KiB, as one chunk in a batch of 1, or 4 MiB (-4MiB), as
// a batch of 16 such chunks.
func BenchmarkTransportFloor(b *testing.B) {
	for _, size := range []int{256 << 10, 4 << 20} {
		transportFloor(b, size)
	}
}

func transportFloor(b *testing.B, size int) {
	suffix, per := "", size/(256<<10)
	if per > 1 {
		suffix = fmt.Sprintf("-%dMiB", size>>20)
	}
	for _, network := range []string{"tcp", "unix"} {
		b.Run("socket/"+network+suffix, func(b *testing.B) {
			lis := remotetest.Listen(b, network)
			defer lis.Close()
			go func() {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				buf := make([]byte, size)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
			c, err := net.Dial(network, lis.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			out, in := make([]byte, size), make([]byte, size)
			roundTrips(b, per, func() {
				if _, err := c.Write(out); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, in); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run("grpc/"+network+suffix, func(b *testing.B) {
			srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), grpc.ForceServerCodecV2(rawCodec{}))
			srv.RegisterService(&echoDesc, nil)
			cc := remotetest.Serve(b, network, srv)
			s, err := cc.NewStream(context.Background(), &echoDesc.Streams[0], "/floor.Echo/Echo", grpc.ForceCodecV2(rawCodec{}))
			if err != nil {
				b.Fatal(err)
			}
			out := mem.BufferSlice{mem.SliceBuffer(make([]byte, size))}
			roundTrips(b, per, func() {
				if err := s.SendMsg(out); err != nil {
					b.Fatal(err)
				}
				var in mem.BufferSlice
				if err := s.RecvMsg(&in); err != nil {
					b.Fatal(err)
				}
				if in.Len() != size {
					b.Fatalf("echoed %d bytes", in.Len())
				}
				in.Free()
			})
		})
	}
}

// roundTrips times b.N calls of rt, each moving per times 256 KiB each
// way, reporting CPU and wall time per 256 KiB.
func roundTrips(b *testing.B, per int, rt func()) {
	rt() // warm
	b.ResetTimer()
	c0, t0 := cpuTime(b), time.Now()
	for range b.N {
		rt()
	}
	wall, cpu := time.Since(t0), cpuTime(b)-c0
	n := float64(b.N * per)
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/256KiB")
	b.ReportMetric(float64(wall.Microseconds())/n, "µs/256KiB")
}

// rawCodec sends a mem.BufferSlice as it is and receives one as gRPC
// holds it: no marshalling, no gathering.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	s := v.(mem.BufferSlice)
	s.Ref() // gRPC frees what Marshal returns; the caller keeps its own
	return s, nil
}

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if l, ok := v.(*wire.Lenient); ok { // how internal/rpc's servers receive
		l.Err = c.Unmarshal(data, l.Msg)
		return nil
	}
	data.Ref()
	*v.(*mem.BufferSlice) = data
	return nil
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "floor.Echo",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName: "Echo", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, s grpc.ServerStream) error {
			for {
				var in mem.BufferSlice
				if err := s.RecvMsg(&in); err != nil {
					return nil
				}
				err := s.SendMsg(in)
				in.Free()
				if err != nil {
					return err
				}
			}
		},
	}},
}
