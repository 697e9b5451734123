// Where a command's flags come from: the command line, $ZARRGATE_<FLAG>,
// a --config file, or their defaults, in that order of precedence; and the
// effective configuration a serving command logs at debug level.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// configFlagName is the flag every command takes (newFlags adds it): a
// YAML file of flag values.
const configFlagName = "config"

const configUsage = "YAML file of flag values, keys named as the flags (memory-limit: 2GiB); the environment and the command line override it"

// Where a flag's value came from, as the effective configuration says.
const (
	fromDefault = "default"
	fromFile    = "file"
	fromEnv     = "env"
	fromFlag    = "flag"
)

// flagSources records where each flag that is not at its default was set.
// A later source overrides an earlier one, as the arguments do.
type flagSources struct {
	file string            // the --config file, if any
	from map[string]string // flag name → fromFile, fromEnv or fromFlag
}

func (s *flagSources) of(name string) string {
	if s == nil {
		return fromDefault
	}
	if f, ok := s.from[name]; ok {
		return f
	}
	return fromDefault
}

type sourcesKey struct{}

// assembleArgs returns a command's arguments with its configuration file
// and environment in front (file, then environment, then the command line:
// the flag package keeps the last value given, so the command line wins),
// and where each flag came from. fs is a fresh set of the command's flags
// (flagsOf); it is used to check the file's and the environment's values,
// and its values are garbage afterwards.
func assembleArgs(fs *flag.FlagSet, args []string) ([]string, *flagSources, error) {
	src := &flagSources{from: map[string]string{}}
	if fs == nil {
		return args, src, nil
	}
	// The flags of the command line, for --config and the sources. A
	// mistake or --help here is left to the command, which reports it.
	if _, err := parseInterspersed(fs, args); errors.Is(err, flag.ErrHelp) {
		return args, src, nil
	}
	var onCmdline []string
	fs.Visit(func(f *flag.Flag) { onCmdline = append(onCmdline, f.Name) })
	path := ""
	if f := fs.Lookup(configFlagName); f != nil {
		path = f.Value.String()
		if path == "" {
			path = os.Getenv(envName(configFlagName))
		}
	}
	var file []string
	if path != "" {
		var err error
		if file, err = configArgs(fs, path); err != nil {
			return nil, nil, err
		}
		src.file = path
		for _, a := range file {
			src.from[argName(a)] = fromFile
		}
	}
	env, err := envArgs(fs)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range env {
		src.from[argName(a)] = fromEnv
	}
	for _, n := range onCmdline {
		src.from[n] = fromFlag
	}
	return append(append(file, env...), args...), src, nil
}

// argName is the flag name of a --name=value argument.
func argName(arg string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
	return name
}

// configArgs reads a --config file: one YAML mapping from flag names (as
// on the command line, without dashes) to scalar values. It returns the
// values as --name=value arguments after checking each on fs. Unknown and
// repeated keys, values that are not scalars and values the flag refuses
// are usage errors naming the file, line and key: a misspelt key must not
// leave a setting at its default unnoticed.
func configArgs(fs *flag.FlagSet, path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--config: %w", err)}
	}
	bad := func(line int, format string, a ...any) error {
		return usageError{fmt.Errorf("--config %s line %d: %s", path, line, fmt.Sprintf(format, a...))}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, nil // empty: nothing set
	case err != nil:
		return nil, usageError{fmt.Errorf("--config %s: %v", path, err)}
	}
	var second yaml.Node
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		return nil, usageError{fmt.Errorf("--config %s: want one YAML document (a mapping of flag names to values), found more", path)}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	m := doc.Content[0]
	if m.Kind == yaml.ScalarNode && m.Tag == "!!null" {
		return nil, nil // "---" and nothing else
	}
	if m.Kind != yaml.MappingNode {
		return nil, bad(m.Line, "want a mapping of flag names to values, such as \"memory-limit: 2GiB\"")
	}
	var out []string
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, bad(k.Line, "keys are flag names")
		}
		name := k.Value
		if prev, ok := seen[name]; ok {
			return nil, bad(k.Line, "key %q repeats the one on line %d", name, prev)
		}
		seen[name] = k.Line
		f := fs.Lookup(name)
		switch {
		case name == configFlagName:
			return nil, bad(k.Line, "key %q: a configuration file cannot name another", name)
		case f == nil:
			hint := ""
			if alt := strings.ReplaceAll(strings.TrimLeft(name, "-"), "_", "-"); alt != name && fs.Lookup(alt) != nil {
				hint = fmt.Sprintf(" (did you mean %q?)", alt)
			}
			return nil, bad(k.Line, "unknown key %q: zarrgate %s has no flag --%s%s", name, strings.TrimPrefix(fs.Name(), "zarrgate "), name, hint)
		}
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return nil, bad(v.Line, "key %q: want a single value (a string, number, size, duration or true/false)", name)
		}
		if err := fs.Set(name, v.Value); err != nil {
			return nil, bad(v.Line, "%s: %q: want a %s: %v", name, v.Value, flagType(f), err)
		}
		out = append(out, "--"+name+"="+v.Value)
	}
	return out, nil
}

// secretFlags hold credentials themselves, not the path of a file with
// them: the effective configuration never shows their values.
var secretFlags = map[string]bool{"token": true}

// logEffectiveConfig logs, at debug level, every flag of fs with its value
// and where it came from (sources from run, through ctx).
func logEffectiveConfig(ctx context.Context, logger *slog.Logger, fs *flag.FlagSet) {
	if fs == nil || !logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	src, _ := ctx.Value(sourcesKey{}).(*flagSources)
	var attrs []any
	if src != nil && src.file != "" {
		attrs = append(attrs, "config_file", src.file)
	}
	fs.VisitAll(func(f *flag.Flag) {
		attrs = append(attrs, slog.Group(f.Name, "value", shownValue(f), "from", src.of(f.Name)))
	})
	logger.Debug("effective configuration", attrs...)
}

// shownValue is a flag's value as the effective configuration prints it:
// secrets redacted, and passwords in URLs (s3://user:pass@...) too.
func shownValue(f *flag.Flag) string {
	v := f.Value.String()
	if v == "" {
		return v
	}
	if secretFlags[f.Name] {
		return "REDACTED"
	}
	if strings.Contains(v, "@") && strings.Contains(v, "://") {
		if u, err := url.Parse(v); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				return u.Redacted()
			}
		}
	}
	return v
}

// flagType names the kind of value a flag takes, for errors.
func flagType(f *flag.Flag) string {
	if _, ok := f.Value.(*sizeValue); ok {
		return "size"
	}
	if t, _ := flag.UnquoteUsage(f); t != "" {
		return t
	}
	return "true or false"
}
