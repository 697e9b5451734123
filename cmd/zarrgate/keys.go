// The raw-key commands: zarrgate get, put and rm.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("get", stderr)
	addr := addrFlag(fs)
	output := fs.String("o", "-", "output file (- for stdout)")
	key, err := parseWithPath(fs, args, false)
	if err != nil {
		return err
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.Store(ctx)
	if err != nil {
		return err
	}
	obj, err := s.Get(ctx, key, storesvc.ByteRange{})
	if err != nil {
		return err
	}
	defer obj.Close()
	out := stdout
	if *output != "-" {
		f, err := os.Create(*output)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	_, err = io.Copy(out, obj)
	return err
}

func runPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("put", stderr)
	addr := addrFlag(fs)
	input := fs.String("i", "-", "input file (- for stdin)")
	ifAbsent := fs.Bool("if-absent", false, "only write if the key does not exist")
	verbose := fs.Bool("v", false, "print the key's new generation to stderr")
	key, err := parseWithPath(fs, args, false)
	if err != nil {
		return err
	}
	var in io.Reader = os.Stdin
	if *input != "-" {
		f, err := os.Open(*input)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.Store(ctx)
	if err != nil {
		return err
	}
	gen, err := s.Set(ctx, key, in, storesvc.Condition{IfAbsent: *ifAbsent})
	if err != nil {
		return err
	}
	if *verbose {
		fmt.Fprintf(stderr, "%s generation %s\n", key, gen)
	}
	return nil
}

func runRm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rm", stderr)
	addr := addrFlag(fs)
	recursive := fs.Bool("r", false, "remove a node or prefix and everything below it")
	key, err := parseWithPath(fs, args, false)
	if err != nil {
		return err
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.Store(ctx)
	if err != nil {
		return err
	}
	if *recursive {
		return s.ErasePrefix(ctx, key+"/")
	}
	if _, err := s.Get(ctx, key, storesvc.Bounded(0, 0)); err != nil {
		if errors.Is(err, storesvc.ErrNotFound) {
			return errs.New(errs.NotFound, "rm: key %q not found (use -r for a prefix)", key)
		}
		return err
	}
	return s.Erase(ctx, key, storesvc.Condition{})
}
