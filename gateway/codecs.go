package gateway

// Codecs runs codec chains for the gateway (placeholder until codecsvc
// lands).
type Codecs interface{}
