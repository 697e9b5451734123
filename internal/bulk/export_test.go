package bulk

// ShortReads is how many readvs of r returned less than they asked for.
func ShortReads(r *Reader) int { return r.short }
