package main

import "testing"

func TestTextString(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain", "ünï✓": "ünï✓", "": `""`, "a b": `"a b"`, "a\tb": `"a\tb"`, "a\nb": `"a\nb"`,
		`"q"`: `"\"q\""`, `x"y`: `"x\"y"`, `a\b`: `"a\\b"`, "\xff": `"\xff"`, "nbsp\u00a0": `"nbsp\u00a0"`,
	} {
		if got := textString(in); got != want {
			t.Errorf("textString(%q) = %s, want %s", in, got, want)
		}
	}
}
