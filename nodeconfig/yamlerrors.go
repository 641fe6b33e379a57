package nodeconfig

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The decoder's type errors name Go types ("field colour not found in type
// nodeconfig.Cluster", "cannot unmarshal !!str `many` into uint64"); an
// operator knows the file's keys. yamlProblems rewrites each in the file's
// terms, finding the key by its line and text in the document.
var (
	unknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \S+$`)
	cannotDecode = regexp.MustCompile(`^line (\d+): cannot unmarshal !!\w+ ` + "`(.*)`" + ` into (\S+)$`)
	lineFirst    = regexp.MustCompile(`^line (\d+): (.*)$`)
)

// located is one key or scalar value of the document and the dotted path
// of the key it belongs to.
type located struct {
	line  int
	text  string
	path  string
	isKey bool
}

func locate(data []byte) []located {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil
	}
	var out []located
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				out = append(out, located{line: k.Line, text: k.Value, path: p, isKey: true})
				walk(v, p)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path+"[]")
			}
		case yaml.ScalarNode:
			out = append(out, located{line: n.Line, text: n.Value, path: path})
		}
	}
	walk(&doc, "")
	return out
}

func find(all []located, line int, text string, isKey bool) string {
	for _, l := range all {
		if l.line == line && l.text == text && l.isKey == isKey {
			return l.path
		}
	}
	return ""
}

// kindOf names what a Go type accepts, in YAML terms.
func kindOf(goType string) string {
	switch {
	case strings.HasPrefix(goType, "uint"):
		return "a whole number of 0 or more"
	case strings.HasPrefix(goType, "int"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "duration":
		return "a duration (use e.g. 500ms, 10s)"
	case goType == "bool":
		return "true or false"
	case goType == "string" || strings.HasSuffix(goType, "Mode"):
		return "text"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	default:
		return "a mapping of keys"
	}
}

// yamlProblems turns the decoder's type errors into one error per problem,
// each naming the key (and line) in the file.
func yamlProblems(data []byte, terr *yaml.TypeError) []error {
	all := locate(data)
	var errs []error
	for _, e := range terr.Errors {
		if m := unknownField.FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			path := find(all, line, m[2], true)
			if path == "" {
				path = m[2]
			}
			errs = append(errs, fmt.Errorf("%s (line %d): unknown field", path, line))
			continue
		}
		if m := cannotDecode.FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			path := find(all, line, m[2], false)
			if path == "" {
				path = "line " + m[1]
			} else {
				path += " (line " + m[1] + ")"
			}
			errs = append(errs, fmt.Errorf("%s: %q is not %s", path, m[2], kindOf(m[3])))
			continue
		}
		if m := lineFirst.FindStringSubmatch(e); m != nil {
			errs = append(errs, fmt.Errorf("line %s: %s", m[1], m[2]))
			continue
		}
		errs = append(errs, errors.New(e))
	}
	return errs
}
