package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// A config file (--config FILE) holds one section per command, each a
// mapping from flag names to values, so that one file serves record and
// serve alike:
//
//	record:
//	  data: /var/lib/heatscope
//	  frequency: 99
//	  max-cpu: 1
//	serve:
//	  listen: 127.0.0.1:7070
//
// Flags given on the command line override the file. Unknown sections and
// keys are errors that name them, so a typo does not silently fall back to
// a default.

// configCommands are the commands whose flags a config file may set.
var configCommands = []string{"record", "serve"}

// maxConfigBytes bounds a config file: it is a few lines.
const maxConfigBytes = 1 << 20

// addConfigFlag registers --config.
func addConfigFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "YAML file with this command's flags under a '"+fs.Name()+":' key; flags given here override it")
}

// parseFlagsWithConfig parses args, then sets every flag the command line
// left unset from the --config file, if one was given. It returns where
// the file set each flag, for the errors found when the values are
// checked (configOrigins.explain).
func parseFlagsWithConfig(fs *flag.FlagSet, config *string, args []string) (configOrigins, error) {
	origins := configOrigins{command: fs.Name(), lines: map[string]int{}}
	if err := parseFlags(fs, args); err != nil {
		return origins, err
	}
	if *config == "" {
		return origins, nil
	}
	origins.file = *config
	f, err := os.Open(*config)
	if err != nil {
		return origins, usageError{fmt.Errorf("--config: %w", err)}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return origins, usageError{fmt.Errorf("--config: read %s: %w", *config, err)}
	}
	if len(b) > maxConfigBytes {
		return origins, usageError{fmt.Errorf("--config %s: larger than %d bytes", *config, maxConfigBytes)}
	}
	values, err := parseConfig(b, fs.Name())
	if err != nil {
		return origins, usageError{fmt.Errorf("--config %s: %w", *config, err)}
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	for _, v := range values {
		if v.name == "config" {
			return origins, usageError{fmt.Errorf("--config %s: line %d: %s.config: a config file cannot name another", *config, v.line, fs.Name())}
		}
		if fs.Lookup(v.name) == nil {
			return origins, usageError{fmt.Errorf("--config %s: line %d: unknown key %s.%s (the keys are %s's flags)", *config, v.line, fs.Name(), v.name, fs.Name())}
		}
		if onCommandLine[v.name] {
			continue
		}
		// A repeatable flag takes a list item by item (a regular
		// expression may hold a comma); others take it comma-joined.
		values := []string{v.value}
		if _, repeatable := fs.Lookup(v.name).Value.(*stringList); repeatable && v.items != nil {
			values = v.items
		}
		for _, value := range values {
			if err := fs.Set(v.name, value); err != nil {
				return origins, usageError{fmt.Errorf("--config %s: line %d: %s.%s %q: %w", *config, v.line, fs.Name(), v.name, value, err)}
			}
		}
		origins.lines[v.name] = v.line
	}
	return origins, nil
}

// configOrigins are the flags a config file set, each with its line.
type configOrigins struct {
	file, command string
	lines         map[string]int
}

// explain adds to err, when it is about a flag the config file set (its
// message starts with --NAME, as every flag's error does), the file and
// line that set it: a value is checked after the file is read, so its
// error would otherwise name a flag the command line never gave.
func (o configOrigins) explain(err error) error {
	if err == nil || o.file == "" {
		return err
	}
	name, ok := strings.CutPrefix(err.Error(), "--")
	if !ok {
		return err
	}
	if end := strings.IndexAny(name, " :="); end >= 0 {
		name = name[:end]
	}
	line, ok := o.lines[name]
	if !ok {
		return err
	}
	return fmt.Errorf("%w (set by --config %s, line %d: %s.%s)", err, o.file, line, o.command, name)
}

// configValue is one flag's value from a config file: value, and for a
// list its items too (value joins them with commas).
type configValue struct {
	name, value string
	items       []string
	line        int
}

// parseConfig returns the values of command's section of a config file.
// Scalars are taken as the flag would take them from the command line;
// lists are joined with commas (pid: [1, 2] is --pid 1,2).
func parseConfig(b []byte, command string) ([]configValue, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file sets nothing
		}
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping of commands (%s) to their flags", root.Line, strings.Join(configCommands, ", "))
	}
	var out []configValue
	seenSection := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, section := root.Content[i], root.Content[i+1]
		if !slices.Contains(configCommands, key.Value) {
			return nil, fmt.Errorf("line %d: unknown key %q (want %s)", key.Line, key.Value, strings.Join(configCommands, " or "))
		}
		if seenSection[key.Value] {
			return nil, fmt.Errorf("line %d: %s given twice", key.Line, key.Value)
		}
		seenSection[key.Value] = true
		if section.Kind == yaml.ScalarNode && section.Tag == "!!null" {
			continue
		}
		if section.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: %s: want a mapping of flag names to values", section.Line, key.Value)
		}
		seen := map[string]bool{}
		for j := 0; j+1 < len(section.Content); j += 2 {
			k, v := section.Content[j], section.Content[j+1]
			if seen[k.Value] {
				return nil, fmt.Errorf("line %d: %s.%s given twice", k.Line, key.Value, k.Value)
			}
			seen[k.Value] = true
			value, items, err := configScalar(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s.%s: %w", v.Line, key.Value, k.Value, err)
			}
			if key.Value == command {
				out = append(out, configValue{name: k.Value, value: value, items: items, line: k.Line})
			}
		}
	}
	return out, nil
}

// configScalar returns a value as a flag string, and a list's items.
func configScalar(v *yaml.Node) (string, []string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil, nil
		}
		return v.Value, nil, nil
	case yaml.SequenceNode:
		items := make([]string, 0, len(v.Content))
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode {
				return "", nil, errors.New("a list may hold only plain values")
			}
			items = append(items, item.Value)
		}
		return strings.Join(items, ","), items, nil
	default:
		return "", nil, errors.New("want a value or a list of values")
	}
}
