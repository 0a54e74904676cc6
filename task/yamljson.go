package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/payload"
	"gopkg.in/yaml.v3"
)

// jsonFromNode re-encodes a YAML node as JSON, keeping mapping order, and
// decodes that into v: payload's types already know Kernelbot's JSON.
func jsonFromNode(n *yaml.Node, v any) error {
	var buf bytes.Buffer
	if err := writeJSON(&buf, n, 0); err != nil {
		return err
	}
	return json.Unmarshal(buf.Bytes(), v)
}

func writeJSON(buf *bytes.Buffer, n *yaml.Node, depth int) error {
	if depth > payload.MaxJSONDepth {
		return errors.New("nested too deeply")
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			buf.WriteString("null")
			return nil
		}
		return writeJSON(buf, n.Content[0], depth)
	case yaml.AliasNode:
		return writeJSON(buf, n.Alias, depth+1)
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			buf.Write(k)
			buf.WriteByte(':')
			if err := writeJSON(buf, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, c, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		return writeScalar(buf, n)
	default:
		return fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	return nil
}

func writeScalar(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!null":
		buf.WriteString("null")
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return err
		}
		fmt.Fprint(buf, b)
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return err
		}
		fmt.Fprint(buf, i)
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return err
		}
		b, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("line %d: %v is not a JSON number", n.Line, n.Value)
		}
		buf.Write(b)
	default:
		b, _ := json.Marshal(n.Value)
		buf.Write(b)
	}
	return nil
}
