package gateway

// SplitBlock hands b to send in pieces of at most limit data bytes (or a
// single element, if one is larger), cut along the outermost dimension
// longer than 1, so that every piece is contiguous in b. elem is the
// element size (0: variable length, cut by b.Offsets). Pieces share b's
// data and own no buffer, except b itself when it needs no cut: transports
// with a message size limit and sinks with an allocation limit both use it.
func SplitBlock(b Block, elem int, limit int64, send func(Block) error) error {
	if int64(len(b.Data)) <= limit {
		return send(b)
	}
	d := 0
	for d < len(b.Shape) && b.Shape[d] <= 1 {
		d++
	}
	if d == len(b.Shape) {
		return send(b) // one element
	}
	inner := product(b.Shape[d+1:]) // elements per slice along d
	// byteAt is the data offset of the first element of slice i along d.
	byteAt := func(i int64) int64 {
		if elem > 0 {
			return i * inner * int64(elem)
		}
		return b.Offsets[i*inner]
	}
	for i := int64(0); i < b.Shape[d]; {
		j := i + 1
		for j < b.Shape[d] && byteAt(j+1)-byteAt(i) <= limit {
			j++
		}
		piece := Block{Origin: clone(b.Origin), Shape: clone(b.Shape), Data: b.Data[byteAt(i):byteAt(j)]}
		piece.Origin[d] += i
		piece.Shape[d] = j - i
		if elem == 0 {
			base := b.Offsets[i*inner]
			piece.Offsets = make([]int64, (j-i)*inner+1)
			for k := range piece.Offsets {
				piece.Offsets[k] = b.Offsets[i*inner+int64(k)] - base
			}
		}
		if err := SplitBlock(piece, elem, limit, send); err != nil {
			return err
		}
		i = j
	}
	return nil
}
