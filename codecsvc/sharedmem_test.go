package codecsvc_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/shm"
)

// rawStream is a Process stream to a budgeted codec worker, driven by
// hand as an adversarial gateway would.
type rawStream struct {
	t  *testing.T
	st codecv1.CodecService_ProcessClient
	id uint64
}

func openRaw(t *testing.T) *rawStream {
	c := codecv1.NewCodecServiceClient(budgetWorker(t, membudget.New(256<<20, time.Second)))
	st, err := c.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.CloseSend() })
	return &rawStream{t: t, st: st}
}

// do sends one request and returns its answer.
func (r *rawStream) do(req *codecv1.ProcessRequest) *codecv1.ProcessResponse {
	r.t.Helper()
	r.id++
	req.Id = r.id
	if err := r.st.Send(req); err != nil {
		r.t.Fatal(err)
	}
	resp, err := r.st.Recv()
	if err != nil {
		r.t.Fatalf("the stream broke: %v", err)
	}
	if resp.GetId() != r.id {
		r.t.Fatalf("answer to %d, want %d", resp.GetId(), r.id)
	}
	return resp
}

func (r *rawStream) attach(o *codecv1.SharedMemoryOffer) *codecv1.SharedMemoryAnswer {
	r.t.Helper()
	return r.do(&codecv1.ProcessRequest{Work: &codecv1.ProcessRequest_Attach{Attach: o}}).GetAttached()
}

func (r *rawStream) decode(d *codecv1.DecodeRequest) *codecv1.ProcessResponse {
	r.t.Helper()
	return r.do(&codecv1.ProcessRequest{Work: &codecv1.ProcessRequest_Decode{Decode: d}})
}

// encodedFloats is a zstd chunk of n float32s and its decoded bytes.
func encodedFloats(t *testing.T, n int64) (*codecv1.ChunkSpec, []byte, []byte) {
	data := make([]byte, 4*n)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	ps := protoSpec(t, zstdChain, "float32", n)
	spec, _ := codecsvc.SpecFromProto(ps)
	enc, err := codecsvc.NewLocal().Encode(context.Background(), spec, []codec.Chunk{{Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	return ps, enc[0], data
}

// A worker attaches a segment only with its token and size; one it
// cannot attach (wrong token, wrong size, another process's file, or
// shared memory turned off) is declined with a reason, and the stream
// goes on with bytes; regions on a stream without a segment are
// InvalidArgument.
func TestSharedMemoryOfferDeclined(t *testing.T) {
	seg, err := shm.CreateSealed(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	unsealed, err := shm.Create(1 << 20) // its owner could shrink it under the worker
	if err != nil {
		t.Fatal(err)
	}
	defer unsealed.Close()
	ps, enc, data := encodedFloats(t, 4096)
	bad := bytes.Clone(seg.Token)
	bad[3] ^= 0x40
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	for name, o := range map[string]*codecv1.SharedMemoryOffer{
		"wrong token":       {Path: seg.Path, Size: 1 << 20, Token: bad},
		"not sealed":        {Path: unsealed.Path, Size: 1 << 20, Token: unsealed.Token},
		"wrong size":        {Path: seg.Path, Size: 2 << 20, Token: seg.Token},
		"no token":          {Path: seg.Path, Size: 1 << 20},
		"another process":   {Path: fmt.Sprintf("/proc/%d/fd/0", sleep.Process.Pid), Size: 1 << 20, Token: seg.Token},
		"a missing file":    {Path: "/nonexistent/segment", Size: 1 << 20, Token: seg.Token},
		"a directory":       {Path: os.TempDir(), Size: 1 << 20, Token: seg.Token},
		"a huge size":       {Path: seg.Path, Size: math.MaxUint64, Token: seg.Token},
		"past MaxAttach":    {Path: seg.Path, Size: shm.MaxAttachBytes + 1, Token: seg.Token},
		"smaller than data": {Path: seg.Path, Size: 10, Token: seg.Token},
	} {
		t.Run(name, func(t *testing.T) {
			r := openRaw(t)
			if a := r.attach(o); a.GetAttached() || a.GetReason() == "" {
				t.Fatalf("offer: %v", a)
			}
			resp := r.decode(&codecv1.DecodeRequest{Spec: ps, Encoded: [][]byte{enc}})
			if ch := resp.GetDecode().GetChunks(); len(ch) != 1 || !bytes.Equal(ch[0].GetData(), data) {
				t.Fatalf("decode with bytes after a declined offer: %v", resp.GetError())
			}
			resp = r.decode(&codecv1.DecodeRequest{Spec: ps, Encoded: [][]byte{enc}, Outputs: []*codecv1.SharedRegion{{Offset: 64, Length: 1 << 14}}})
			if e := resp.GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument {
				t.Fatalf("regions without a segment: %v, want InvalidArgument", resp)
			}
		})
	}
	// A worker with shared memory turned off declines a good offer.
	t.Run("turned off", func(t *testing.T) {
		srv := codecsvc.NewServer(codecsvc.NewLocal())
		srv.SetSharedMemory(false)
		c := codecv1.NewCodecServiceClient(serveServer(t, srv))
		st, err := c.Process(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer st.CloseSend()
		r := &rawStream{t: t, st: st}
		if a := r.attach(&codecv1.SharedMemoryOffer{Path: seg.Path, Size: 1 << 20, Token: seg.Token}); a.GetAttached() {
			t.Fatal("a worker with shared memory off attached")
		}
	})
}

// Every region a gateway names is checked against the segment's data
// area: out of bounds, over the token, huge, overflowing, or too many in
// all are InvalidArgument for that batch, and the worker goes on (a good
// batch on the same stream then decodes through the segment).
func TestSharedMemoryAdversarialRegions(t *testing.T) {
	const size = 1 << 20
	seg, err := shm.CreateSealed(size)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	r := openRaw(t)
	if a := r.attach(&codecv1.SharedMemoryOffer{Path: seg.Path, Size: size, Token: seg.Token}); !a.GetAttached() {
		t.Fatalf("offer declined: %s", a.GetReason())
	}
	if a := r.attach(&codecv1.SharedMemoryOffer{Path: seg.Path, Size: size, Token: seg.Token}); a.GetAttached() {
		t.Fatal("a second offer on the stream was taken")
	}
	ps, enc, data := encodedFloats(t, 4096)
	in := &codecv1.SharedRegion{Offset: 4096, Length: uint64(len(enc))}
	copy(seg.Data[4096:], enc)
	out := &codecv1.SharedRegion{Offset: 1 << 18, Length: uint64(len(data))}
	reg := func(off, n uint64) []*codecv1.SharedRegion { return []*codecv1.SharedRegion{{Offset: off, Length: n}} }
	for name, d := range map[string]*codecv1.DecodeRequest{
		"input past the end":       {SharedEncoded: reg(size-10, 11)},
		"input over the token":     {SharedEncoded: reg(0, 100)},
		"input at offset 63":       {SharedEncoded: reg(63, 10)},
		"input of huge length":     {SharedEncoded: reg(64, math.MaxUint64)},
		"input offset overflow":    {SharedEncoded: reg(math.MaxUint64-5, 10)},
		"input offset past end":    {SharedEncoded: reg(size+1, 0)},
		"inputs beyond the area":   {SharedEncoded: []*codecv1.SharedRegion{{Offset: 64, Length: size - 64}, {Offset: 64, Length: size - 64}}},
		"output past the end":      {SharedEncoded: []*codecv1.SharedRegion{in}, Outputs: reg(size-100, 200)},
		"output over the token":    {SharedEncoded: []*codecv1.SharedRegion{in}, Outputs: reg(8, 1<<14)},
		"output overflow":          {SharedEncoded: []*codecv1.SharedRegion{in}, Outputs: reg(math.MaxUint64, math.MaxUint64)},
		"outputs of another count": {SharedEncoded: []*codecv1.SharedRegion{in}, Outputs: []*codecv1.SharedRegion{out, out}},
		"both bytes and regions":   {SharedEncoded: []*codecv1.SharedRegion{in}, Encoded: [][]byte{enc}},
	} {
		d.Spec = ps
		if e := r.decode(d).GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, e)
		}
	}
	// A batch cannot make the worker copy more than a message's worth,
	// whatever the segment's size.
	restore := codecsvc.SetMaxSharedEncoded(3 << 10)
	if e := r.decode(&codecv1.DecodeRequest{Spec: ps, SharedEncoded: []*codecv1.SharedRegion{{Offset: 64, Length: 2 << 10}, {Offset: 64, Length: 2 << 10}}}).GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument {
		t.Errorf("regions of more than maxSharedEncoded: %v, want InvalidArgument", e)
	}
	restore()
	// Regions in a unary Decode, which has no segment, are refused:
	// encoded chunks named by region, or output regions for chunks sent
	// as bytes (whose answer would otherwise go inline, silently).
	c := codecv1.NewCodecServiceClient(budgetWorker(t, membudget.New(64<<20, time.Second)))
	for name, d := range map[string]*codecv1.DecodeRequest{
		"encoded regions": {Spec: ps, SharedEncoded: []*codecv1.SharedRegion{in}},
		"output regions":  {Spec: ps, Encoded: [][]byte{enc}, Outputs: []*codecv1.SharedRegion{out}},
		"both":            {Spec: ps, SharedEncoded: []*codecv1.SharedRegion{in}, Outputs: []*codecv1.SharedRegion{out}},
	} {
		if _, err := c.Decode(context.Background(), d); status.Code(err) != codes.InvalidArgument {
			t.Errorf("unary Decode with %s: %v, want InvalidArgument", name, err)
		}
	}
	// The worker is up, and the stream works through the segment.
	resp := r.decode(&codecv1.DecodeRequest{Spec: ps, SharedEncoded: []*codecv1.SharedRegion{in}, Outputs: []*codecv1.SharedRegion{out}})
	ch := resp.GetDecode().GetChunks()
	if len(ch) != 1 || ch[0].SharedLength == nil || ch[0].GetSharedLength() != uint64(len(data)) || len(ch[0].GetData()) != 0 {
		t.Fatalf("good batch: %v", resp)
	}
	if !bytes.Equal(seg.Data[1<<18:1<<18+len(data)], data) {
		t.Fatal("the worker wrote wrong bytes into the output region")
	}
	// An output region too small: the answer comes as bytes.
	resp = r.decode(&codecv1.DecodeRequest{Spec: ps, SharedEncoded: []*codecv1.SharedRegion{in}, Outputs: reg(1<<18, uint64(len(data)-1))})
	if ch := resp.GetDecode().GetChunks(); len(ch) != 1 || ch[0].SharedLength != nil || !bytes.Equal(ch[0].GetData(), data) {
		t.Fatalf("output region too small: %v", resp.GetError())
	}
}
