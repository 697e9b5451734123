package client

// IdleMappings is how many shared-memory mappings c keeps for later reads.
func IdleMappings(c *Client) int {
	c.maps.mu.Lock()
	defer c.maps.mu.Unlock()
	return len(c.maps.idle)
}
