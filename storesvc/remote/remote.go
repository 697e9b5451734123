// Package remote is a store that talks to a zarrgate StoreService over gRPC.
// It implements every interface of the store contract, so a remote store is
// used exactly like a local one, and its errors match the same sentinels.
package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	"google.golang.org/grpc"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/internal/storeproto"
)

// Client is the raw remote store. Use New, which puts the portable layer in
// front of it so that bad input fails before a round trip.
type Client struct {
	c    storev1.StoreServiceClient
	caps storesvc.Capabilities
}

var _ storesvc.FullStore = (*Client)(nil)

// New asks the server at cc for its capabilities and returns the remote
// store behind the portable layer.
func New(ctx context.Context, cc grpc.ClientConnInterface) (*storesvc.Portable, error) {
	c, err := NewClient(ctx, cc)
	if err != nil {
		return nil, err
	}
	return storesvc.Wrap(c), nil
}

// NewClient returns the raw remote store.
func NewClient(ctx context.Context, cc grpc.ClientConnInterface) (*Client, error) {
	c := storev1.NewStoreServiceClient(cc)
	resp, err := c.GetCapabilities(ctx, &storev1.GetCapabilitiesRequest{})
	if err != nil {
		return nil, fmt.Errorf("store service: %w", grpcerr.FromStatus(err))
	}
	return &Client{c: c, caps: storeproto.CapabilitiesFromProto(resp.GetCapabilities())}, nil
}

// Capabilities implements storesvc.Store: the server's.
func (c *Client) Capabilities() storesvc.Capabilities { return c.caps }

// Close implements storesvc.Store. The connection belongs to the caller.
func (c *Client) Close() error { return nil }

// Get implements storesvc.Store. The first frame is read before Get
// returns, so a missing key is reported here; the rest streams as the
// object is read.
func (c *Client) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.c.Get(ctx, &storev1.GetRequest{Key: key, Range: storeproto.RangeToProto(r)})
	if err != nil {
		cancel()
		return nil, grpcerr.FromStatus(err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		if err == io.EOF {
			return nil, errs.New(errs.DataLoss, "get %q: stream ended without a frame", key)
		}
		return nil, grpcerr.FromStatus(err)
	}
	info := first.GetInfo()
	if info == nil {
		cancel()
		return nil, errs.New(errs.DataLoss, "get %q: first frame carries no value info", key)
	}
	body := &getReader{key: key, stream: stream, cancel: cancel, cur: first.GetData(), left: int64(info.GetLength())}
	return &storesvc.Object{
		ReadCloser: body, Generation: info.GetGeneration(),
		Size: int64(info.GetSize()), Offset: int64(info.GetOffset()), Length: int64(info.GetLength()),
	}, nil
}

type getReader struct {
	key    string
	stream grpc.ServerStreamingClient[storev1.GetResponse]
	cancel context.CancelFunc
	cur    []byte
	left   int64 // bytes not yet returned by Read, including cur
	err    error
}

func (r *getReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		msg, err := r.stream.Recv()
		switch {
		case err == io.EOF && r.left == 0:
			r.err = io.EOF
		case err == io.EOF:
			r.err = errs.New(errs.DataLoss, "get %q: stream ended %d bytes short", r.key, r.left)
		case err != nil:
			r.err = grpcerr.FromStatus(err)
		default:
			r.cur = msg.GetData()
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	r.left -= int64(n)
	if r.left < 0 {
		r.err = errs.New(errs.DataLoss, "get %q: stream sent more bytes than announced", r.key)
		return 0, r.err
	}
	return n, nil
}

func (r *getReader) Close() error {
	r.cancel()
	return nil
}

// GetPartialValues implements storesvc.PartialReader.
func (c *Client) GetPartialValues(ctx context.Context, reqs []storesvc.KeyRange) ([]storesvc.PartialValue, error) {
	req := &storev1.GetPartialValuesRequest{Ranges: make([]*storev1.KeyRange, len(reqs))}
	for i, r := range reqs {
		req.Ranges[i] = &storev1.KeyRange{Key: r.Key, Range: storeproto.RangeToProto(r.Range)}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.GetPartialValues(ctx, req)
	if err != nil {
		return nil, grpcerr.FromStatus(err)
	}
	out := make([]storesvc.PartialValue, len(reqs))
	done := 0
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, grpcerr.FromStatus(err)
		}
		for _, part := range msg.GetParts() {
			i := int(part.GetIndex())
			if i != done || i >= len(out) {
				return nil, errs.New(errs.DataLoss, "get_partial_values: result %d arrived out of order (expected %d)", i, done)
			}
			if !part.GetMissing() {
				if out[i].Data == nil {
					out[i].Data = make([]byte, 0, len(part.GetData()))
				}
				out[i].Data = append(out[i].Data, part.GetData()...)
				out[i].Found = true
				if g := part.GetGeneration(); g != "" {
					out[i].Generation = g
				}
			}
			if part.GetLast() {
				done++
			}
		}
	}
	if done != len(reqs) {
		return nil, errs.New(errs.DataLoss, "get_partial_values: %d of %d results arrived", done, len(reqs))
	}
	return out, nil
}

// Set implements storesvc.Store. The value streams in frames of
// storeproto.FrameSize; if reading it fails, the call is cancelled and the
// server stores nothing.
func (c *Client) Set(ctx context.Context, key string, value io.Reader, cond storesvc.Condition) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.Set(ctx)
	if err != nil {
		return "", grpcerr.FromStatus(err)
	}
	buf := make([]byte, storeproto.FrameSize)
	msg := &storev1.SetRequest{Header: &storev1.SetHeader{Key: key, Condition: storeproto.ConditionToProto(cond)}}
	for {
		n, rerr := io.ReadFull(value, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return "", fmt.Errorf("set %q: reading value: %w", key, rerr)
		}
		if n > 0 || msg.Header != nil {
			msg.Data = buf[:n]
			if err := stream.Send(msg); err != nil {
				if err == io.EOF { // the server ended the call; its status says why
					_, err = stream.CloseAndRecv()
				}
				return "", grpcerr.FromStatus(err)
			}
			msg.Header = nil
		}
		if rerr != nil {
			break
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return "", grpcerr.FromStatus(err)
	}
	return resp.GetGeneration(), nil
}

// SetPartialValues implements storesvc.PartialWriter.
func (c *Client) SetPartialValues(ctx context.Context, writes []storesvc.PartialWrite) error {
	req := &storev1.SetPartialValuesRequest{Writes: make([]*storev1.PartialWrite, len(writes))}
	for i, w := range writes {
		req.Writes[i] = &storev1.PartialWrite{Key: w.Key, Offset: uint64(w.Offset), Data: w.Data}
	}
	_, err := c.c.SetPartialValues(ctx, req)
	return grpcerr.FromStatus(err)
}

// Erase implements storesvc.Store.
func (c *Client) Erase(ctx context.Context, key string, cond storesvc.Condition) error {
	_, err := c.c.Erase(ctx, &storev1.EraseRequest{Key: key, Condition: storeproto.ConditionToProto(cond)})
	return grpcerr.FromStatus(err)
}

// EraseValues implements storesvc.BatchEraser.
func (c *Client) EraseValues(ctx context.Context, keys []string) error {
	_, err := c.c.EraseValues(ctx, &storev1.EraseValuesRequest{Keys: keys})
	return grpcerr.FromStatus(err)
}

// ErasePrefix implements storesvc.PrefixEraser.
func (c *Client) ErasePrefix(ctx context.Context, prefix string) error {
	_, err := c.c.ErasePrefix(ctx, &storev1.ErasePrefixRequest{Prefix: prefix})
	return grpcerr.FromStatus(err)
}

// ListPrefix implements storesvc.Store.
func (c *Client) ListPrefix(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.c.ListPrefix(ctx, &storev1.ListPrefixRequest{Prefix: prefix})
		if err != nil {
			yield("", grpcerr.FromStatus(err))
			return
		}
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield("", grpcerr.FromStatus(err))
				return
			}
			for _, k := range msg.GetKeys() {
				if !yield(k, nil) {
					return
				}
			}
		}
	}
}

// ListDir implements storesvc.DirLister.
func (c *Client) ListDir(ctx context.Context, prefix string) iter.Seq2[storesvc.DirEntry, error] {
	return func(yield func(storesvc.DirEntry, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.c.ListDir(ctx, &storev1.ListDirRequest{Prefix: prefix})
		if err != nil {
			yield(storesvc.DirEntry{}, grpcerr.FromStatus(err))
			return
		}
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(storesvc.DirEntry{}, grpcerr.FromStatus(err))
				return
			}
			for _, k := range msg.GetKeys() {
				if !yield(storesvc.DirEntry{Path: k}, nil) {
					return
				}
			}
			for _, p := range msg.GetPrefixes() {
				if !yield(storesvc.DirEntry{Path: p, IsPrefix: true}, nil) {
					return
				}
			}
		}
	}
}
