package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
	"github.com/kpsim/kpsim/results/resultstest"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/scenarios/backend"
)

// recordDir is package record's folder, from this one.
const recordDir = "../.."

// TestSchemaFile: the checked-in schema is the one the types generate
// (after changing them, go generate ./record).
func TestSchemaFile(t *testing.T) {
	want, err := Generate(recordDir)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(recordDir, SchemaFile))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "record/%s is stale: run go generate ./record", SchemaFile)
}

// TestRunsMatchSchema: the file of a real run (smoke on the in-memory
// kernel, with probes and histograms), and a synthetic one with every
// optional part, written as kpsim writes them, hold nothing the schema
// does not describe and everything it requires.
func TestRunsMatchSchema(t *testing.T) {
	schema := generated(t)

	s, err := scenarios.Load("smoke", nil)
	require.NoError(t, err)
	spec, err := s.BackendSpec()
	require.NoError(t, err)
	be, err := backend.New(spec)
	require.NoError(t, err)
	smoke, err := scenarios.Run(context.Background(), s, scenarios.RunOptions{Backend: be})
	require.NoError(t, err)
	require.NotEmpty(t, smoke.Syncs)
	require.NotNil(t, smoke.Probes, "smoke probes")

	synthetic := resultstest.File(resultstest.Options{Syncs: 12, Services: 20, Probes: true, DualStack: true, Metrics: true, FirstSuccess: true})

	for name, f := range map[string]*record.File{"smoke": smoke, "synthetic": synthetic} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run.json")
			require.NoError(t, results.Write(path, f))
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			v := validate(t, schema, raw)
			require.Empty(t, v.problems)
			require.Greater(t, v.keys, 100, "the walk saw the file")
		})
	}
}

// TestValidatorRefuses: the check above fails a key the schema does not
// describe, a value of the wrong type and a missing required key.
func TestValidatorRefuses(t *testing.T) {
	schema := generated(t)
	for _, doc := range []string{
		`{"schemaVersion": 3, "surprise": 1}`,
		`{"schemaVersion": "3"}`,
	} {
		require.NotEmpty(t, validate(t, schema, []byte(doc)).problems, doc)
	}
}

// generated is the schema Generate writes, decoded.
func generated(t *testing.T) map[string]any {
	t.Helper()
	b, err := Generate(recordDir)
	require.NoError(t, err)
	var schema map[string]any
	require.NoError(t, json.Unmarshal(b, &schema))
	return schema
}

// validate checks the JSON document raw against schema (numbers kept as
// written) and returns the validator with what it found.
func validate(t *testing.T, schema map[string]any, raw []byte) validator {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var doc any
	require.NoError(t, d.Decode(&doc))
	v := validator{root: schema}
	v.check("$", schema, doc)
	return v
}

// validator checks a JSON document against the parts of JSON Schema the
// generated schema uses: $ref, type, enum, properties, required,
// additionalProperties, items, anyOf and minimum.
type validator struct {
	root     map[string]any
	problems []string
	keys     int // object keys checked
}

func (v *validator) fail(path, format string, a ...any) {
	v.problems = append(v.problems, path+": "+fmt.Sprintf(format, a...))
}

func (v *validator) check(path string, s map[string]any, x any) {
	if ref, ok := s["$ref"].(string); ok {
		def := v.root["$defs"].(map[string]any)[strings.TrimPrefix(ref, "#/$defs/")]
		if def == nil {
			v.fail(path, "no definition %s", ref)
			return
		}
		v.check(path, def.(map[string]any), x)
	}
	if alts, ok := s["anyOf"].([]any); ok {
		passed := false
		for _, alt := range alts {
			sub := validator{root: v.root}
			sub.check(path, alt.(map[string]any), x)
			if len(sub.problems) == 0 {
				passed = true
				v.keys += sub.keys
				break
			}
		}
		if !passed {
			v.fail(path, "matches none of anyOf")
		}
	}
	if typ, ok := s["type"]; ok {
		var types []string
		switch typ := typ.(type) {
		case string:
			types = []string{typ}
		case []any:
			for _, t := range typ {
				types = append(types, t.(string))
			}
		}
		if got := jsonType(x); !slices.Contains(types, got) && !(got == "integer" && slices.Contains(types, "number")) {
			v.fail(path, "a %s, want %v", got, types)
			return
		}
	}
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, x) {
		v.fail(path, "%v is none of %v", x, enum)
	}
	if min, ok := s["minimum"].(float64); ok {
		if n, isNum := x.(json.Number); isNum {
			if f, _ := n.Float64(); f < min {
				v.fail(path, "%v below %v", x, min)
			}
		}
	}
	switch x := x.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, k := range req {
				if _, ok := x[k.(string)]; !ok {
					v.fail(path, "no %s", k)
				}
			}
		}
		for k, val := range x {
			v.keys++
			if p, ok := props[k]; ok {
				v.check(path+"."+k, p.(map[string]any), val)
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					v.fail(path, "key %q is not described", k)
				}
			case map[string]any:
				v.check(path+"."+k, ap, val)
			}
		}
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range x {
				v.check(fmt.Sprintf("%s[%d]", path, i), items, e)
			}
		}
	}
}

func jsonType(x any) string {
	switch x := x.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", x)
}
