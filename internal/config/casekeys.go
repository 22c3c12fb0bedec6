package config

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// fileKeys reads the keys of file as it spells them. It returns the keys
// that differ from another key of the same mapping only in case (maxage
// beside maxAge) as errors: the settings are not case-sensitive, so the
// two name one setting and one of the values would be dropped without a
// word. Exact duplicates are YAML errors, reported when the file is read.
// And it returns each key's spelling by its lowercased path
// ("kafka[0].requesttimout" -> "requestTimout"): the decoder sees keys
// lowercased, and a misspelt key is reported as the user wrote it. A file
// that cannot be read or parsed reports nothing here (reading it reports
// that).
func fileKeys(file string) (errs []error, spelled map[string]string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil
	}
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil {
		return nil, nil
	}
	spelled = map[string]string{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.MappingNode:
			first := map[string]string{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				at := k
				if path != "" {
					at = path + "." + k
				}
				spelled[strings.ToLower(at)] = k
				if prev, ok := first[strings.ToLower(k)]; ok && prev != k {
					errs = append(errs, fmt.Errorf("%s: %q and %q name the same setting (keys are not case-sensitive): keep one", at, prev, k))
				} else if !ok {
					first[strings.ToLower(k)] = k
				}
				walk(n.Content[i+1], at)
			}
		}
	}
	walk(&doc, "")
	return errs, spelled
}
