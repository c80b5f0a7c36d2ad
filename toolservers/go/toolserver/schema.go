package toolserver

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schema is a compiled input schema.
type schema struct {
	compiled *jsonschema.Schema
}

var printer = message.NewPrinter(language.English)

// noLoader refuses every external reference: a tool's schema is self-contained ($defs
// and local $refs only), so compiling it never reads a file or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %s: a tool's schema must be self-contained (use $defs)", url)
}

// compileSchema parses and compiles a JSON Schema (draft 2020-12 unless it says
// otherwise); with objectRoot its root must be an object schema. It returns the
// schema's top-level property names.
func compileSchema(name, text string, objectRoot bool) (*schema, []string, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %v", err)
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, errors.New("a schema is a JSON object")
	}
	if objectRoot && root["type"] != "object" {
		return nil, nil, errors.New(`the root must be an object schema: {"type": "object", "properties": {...}}`)
	}
	compiler := jsonschema.NewCompiler()
	compiler.DefaultDraft(jsonschema.Draft2020)
	compiler.UseLoader(noLoader{})
	url := "urn:agentsidecar:tool:" + name
	if err := compiler.AddResource(url, doc); err != nil {
		return nil, nil, err
	}
	compiled, err := compiler.Compile(url)
	if err != nil {
		return nil, nil, err
	}
	var properties []string
	if props, ok := root["properties"].(map[string]any); ok {
		for p := range props {
			properties = append(properties, p)
		}
		slices.Sort(properties)
	}
	return &schema{compiled: compiled}, properties, nil
}

// violations validates parsed arguments and returns one line per problem, each naming
// its field; none when they are valid.
func (s *schema) violations(args any) []string {
	err := s.compiled.Validate(args)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []string{"(arguments): " + err.Error()}
	}
	var lines []string
	collect(verr, &lines)
	slices.Sort(lines)
	return slices.Compact(lines)
}

// collect walks to the leaves of a validation error: the specific problems.
func collect(e *jsonschema.ValidationError, lines *[]string) {
	if len(e.Causes) > 0 {
		for _, cause := range e.Causes {
			collect(cause, lines)
		}
		return
	}
	at := e.InstanceLocation
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, missing := range k.Missing {
			*lines = append(*lines, field(append(slices.Clone(at), missing))+": required argument is missing")
		}
	case *kind.AdditionalProperties:
		for _, extra := range k.Properties {
			*lines = append(*lines, field(append(slices.Clone(at), extra))+": unknown argument; remove it")
		}
	case *kind.Type:
		*lines = append(*lines, fmt.Sprintf("%s: expected %s; got %s", field(at), strings.Join(k.Want, " or "), k.Got))
	default:
		*lines = append(*lines, field(at)+": "+e.ErrorKind.LocalizedString(printer))
	}
}

// field names an argument by its path: "amount", "items.0.sku", or "(arguments)" for the
// object itself.
func field(path []string) string {
	if len(path) == 0 {
		return "(arguments)"
	}
	return strings.Join(path, ".")
}

// invalidArgumentsMessage is what the model reads when its arguments break the schema.
func invalidArgumentsMessage(tool string, lines []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Invalid arguments for %s:\n", tool)
	for _, line := range lines {
		fmt.Fprintf(&b, "- %s\n", line)
	}
	fmt.Fprintf(&b, "Call %s again with corrected arguments.", tool)
	return b.String()
}
