package testcluster

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// MergeYAML lays over onto base: a key of over replaces base's value, except
// that two mappings under the same key merge key by key, so over can set
// one field of a block base already writes (cluster.heartbeat_timeout)
// without repeating the rest of it. Appending text instead would repeat the
// block's key, which a strict decoder refuses.
func MergeYAML(base, over string) (string, error) {
	var b, o yaml.Node
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		return "", fmt.Errorf("parse generated node config: %w", err)
	}
	if err := yaml.Unmarshal([]byte(over), &o); err != nil {
		return "", fmt.Errorf("parse extra node config: %w", err)
	}
	if len(o.Content) == 0 {
		return base, nil // empty or only comments
	}
	if len(b.Content) == 0 {
		b = o
		o = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	if o.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("extra node config: want a mapping of fields at the top, have %s", kindName(o.Content[0].Kind))
	}
	if err := mergeMapping(b.Content[0], o.Content[0], ""); err != nil {
		return "", err
	}
	out, err := yaml.Marshal(&b)
	if err != nil {
		return "", fmt.Errorf("write merged node config: %w", err)
	}
	return string(out), nil
}

func mergeMapping(dst, src *yaml.Node, path string) error {
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		at := -1
		for j := 0; j+1 < len(dst.Content); j += 2 {
			if dst.Content[j].Value == k.Value {
				at = j
				break
			}
		}
		if at < 0 {
			dst.Content = append(dst.Content, k, v)
			continue
		}
		old := dst.Content[at+1]
		if old.Kind == yaml.MappingNode && v.Kind == yaml.MappingNode {
			if err := mergeMapping(old, v, path+k.Value+"."); err != nil {
				return err
			}
			continue
		}
		if old.Kind == yaml.MappingNode && v.Kind != yaml.MappingNode && !(v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
			return fmt.Errorf("extra node config: %s%s is a block of fields, have %s", path, k.Value, kindName(v.Kind))
		}
		dst.Content[at+1] = v
	}
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a single value"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}
