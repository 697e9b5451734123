package main

import "testing"

func TestWithDefaultPort(t *testing.T) {
	for in, want := range map[string]string{
		"localhost":            "localhost:50051",
		"10.0.0.5":             "10.0.0.5:50051",
		"::1":                  "[::1]:50051",
		"[::1]":                "[::1]:50051",
		"localhost:7000":       "localhost:7000",
		"[::1]:7000":           "[::1]:7000",
		"unix:///tmp/zg.sock":  "unix:///tmp/zg.sock",
		"unix:zg.sock":         "unix:zg.sock",
		"dns:///gw.example:80": "dns:///gw.example:80",
		"":                     "",
	} {
		if got := withDefaultPort(in); got != want {
			t.Errorf("withDefaultPort(%q) = %q, want %q", in, got, want)
		}
	}
}
