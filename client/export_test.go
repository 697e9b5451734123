package client

// IdleMappings is how many shared-memory mappings c keeps for later reads.
func IdleMappings(c *Client) int {
	c.maps.mu.Lock()
	defer c.maps.mu.Unlock()
	return len(c.maps.idle)
}

// SetSplitMin sets the smallest slab a client with several connections
// splits, for the length of a test.
func SetSplitMin(t interface{ Cleanup(func()) }, n int64) {
	old := splitMinElements
	splitMinElements = n
	t.Cleanup(func() { splitMinElements = old })
}

// SplitCuts is where a read of sel on a would be cut (nil: not split).
func SplitCuts(a *Array, sel Selection) []int64 { return a.splitCuts(sel) }

// PlacedFrames is how many bulk frames reads have taken straight into
// their destination so far (all clients).
func PlacedFrames() int64 { return placedFrames.Load() }

// SetMinPlacedRow sets the shortest row of a block read straight into
// place, for the length of a test.
func SetMinPlacedRow(t interface{ Cleanup(func()) }, n int64) {
	old := minPlacedRow
	minPlacedRow = n
	t.Cleanup(func() { minPlacedRow = old })
}

// SmallConnsMost is the most small-reads connections c had open (or
// being opened) at once.
func SmallConnsMost(c *Client) int {
	c.smalls.mu.Lock()
	defer c.smalls.mu.Unlock()
	return c.smalls.most
}
