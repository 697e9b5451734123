// Package storeproto converts between the store contract's types
// (package storesvc) and their zarrgate.store.v1 messages, for the
// StoreService server (storesvc/storeserver) and the remote client
// (storesvc/remote). It lives apart from both so that neither links the
// other, and apart from storesvc so that the contract imports no generated
// code.
package storeproto

import (
	"math"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

// FrameSize is the largest data frame a StoreService stream carries.
const FrameSize = 1 << 20

// RangeToProto converts a range for the wire; the whole value is nil.
func RangeToProto(r storesvc.ByteRange) *storev1.ByteRange {
	off, n := r.Parts()
	switch {
	case r.IsWhole():
		return nil
	case r.IsSuffix():
		return &storev1.ByteRange{Range: &storev1.ByteRange_SuffixLength{SuffixLength: uint64(n)}}
	case n < 0:
		return &storev1.ByteRange{Range: &storev1.ByteRange_FromOffset{FromOffset: uint64(off)}}
	}
	return &storev1.ByteRange{Range: &storev1.ByteRange_Bounded_{Bounded: &storev1.ByteRange_Bounded{Offset: uint64(off), Length: uint64(n)}}}
}

// RangeFromProto converts a range from the wire, rejecting values that do
// not fit an int64.
func RangeFromProto(r *storev1.ByteRange) (storesvc.ByteRange, error) {
	check := func(vs ...uint64) error {
		for _, v := range vs {
			if v > math.MaxInt64/2 {
				return errs.New(errs.InvalidArgument, "byte range value %d is too large", v)
			}
		}
		return nil
	}
	switch x := r.GetRange().(type) {
	case nil:
		return storesvc.ByteRange{}, nil
	case *storev1.ByteRange_Bounded_:
		return storesvc.Bounded(int64(x.Bounded.GetOffset()), int64(x.Bounded.GetLength())), check(x.Bounded.GetOffset(), x.Bounded.GetLength())
	case *storev1.ByteRange_FromOffset:
		return storesvc.FromOffset(int64(x.FromOffset)), check(x.FromOffset)
	case *storev1.ByteRange_SuffixLength:
		return storesvc.Suffix(int64(x.SuffixLength)), check(x.SuffixLength)
	}
	return storesvc.ByteRange{}, errs.New(errs.InvalidArgument, "unknown byte range form")
}

// ConditionToProto converts a condition for the wire; unconditional is nil.
// A condition with both fields set (which Portable rejects before it gets
// here) is not representable.
func ConditionToProto(c storesvc.Condition) *storev1.Condition {
	switch {
	case c.IfGenerationMatch != "":
		return &storev1.Condition{Condition: &storev1.Condition_IfGenerationMatch{IfGenerationMatch: c.IfGenerationMatch}}
	case c.IfAbsent:
		return &storev1.Condition{Condition: &storev1.Condition_IfAbsent{IfAbsent: true}}
	}
	return nil
}

// ConditionFromProto converts a condition from the wire.
func ConditionFromProto(c *storev1.Condition) storesvc.Condition {
	switch x := c.GetCondition().(type) {
	case *storev1.Condition_IfAbsent:
		return storesvc.Condition{IfAbsent: x.IfAbsent}
	case *storev1.Condition_IfGenerationMatch:
		return storesvc.Condition{IfGenerationMatch: x.IfGenerationMatch}
	}
	return storesvc.Condition{}
}

// CapabilitiesToProto converts capabilities for the wire.
func CapabilitiesToProto(c storesvc.Capabilities) *storev1.Capabilities {
	return &storev1.Capabilities{
		Readable: c.Readable, Writable: c.Writable, Listable: c.Listable,
		PartialWrites: c.PartialWrites, ConditionalWrites: c.ConditionalWrites, Erasable: c.Erasable,
	}
}

// CapabilitiesFromProto converts capabilities from the wire.
func CapabilitiesFromProto(c *storev1.Capabilities) storesvc.Capabilities {
	return storesvc.Capabilities{
		Readable: c.GetReadable(), Writable: c.GetWritable(), Listable: c.GetListable(),
		PartialWrites: c.GetPartialWrites(), ConditionalWrites: c.GetConditionalWrites(), Erasable: c.GetErasable(),
	}
}
