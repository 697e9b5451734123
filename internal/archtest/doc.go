// Package archtest holds no code: its test checks the floors of the house
// (docs/architecture.md) on the real import graph, so that a change that
// lets the transport leak into the format, the contracts or the engine, or
// that makes a lower floor import a higher one, fails CI instead of waiting
// for a reviewer to notice.
package archtest
