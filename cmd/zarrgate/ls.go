// zarrgate ls: the children of a group.

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
)

func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ls", stderr)
	addr := addrFlag(fs)
	recursive := fs.Bool("r", false, "list every descendant")
	path, err := parseWithPath(fs, args, true)
	if err != nil {
		return err
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	nodes, err := c.List(ctx, path, *recursive)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	for _, n := range nodes {
		if n.IsArray {
			fmt.Fprintf(w, "%-40s array  %-10s %v\n", n.Path, n.DataType, n.Shape)
		} else {
			fmt.Fprintf(w, "%-40s group\n", n.Path)
		}
	}
	return nil
}
