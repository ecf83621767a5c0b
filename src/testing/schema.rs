//! The JSON Schema of test files (`stategraph schema test`), for YAML
//! language servers. It describes shapes; names (graphs, nodes, fields,
//! tools, routes) are checked by `stategraph check`.

use serde_json::{Value, json};

use super::spec::STUB_ERRORS;

/// The JSON Schema (draft 2020-12) of a test file.
pub(crate) fn test_file_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://stategraph.dev/schema/test-file.json",
        "title": "stategraph test file",
        "description": "Cases for `stategraph test`: input, scripted model replies, tool stubs, expectations. Reference: docs/testing.md",
        "type": "object",
        "required": ["cases"],
        "additionalProperties": false,
        "properties": {
            "graph": {"type": "string", "description": "the default graph of the file's cases"},
            "description": {"type": "string"},
            "tools": {"type": "array", "items": {"$ref": "#/$defs/stub"}, "description": "stubs every case shares"},
            "cases": {"type": "array", "items": {"$ref": "#/$defs/case"}}
        },
        "$defs": defs(),
    })
}

fn defs() -> Value {
    let mut m = serde_json::Map::new();
    m.insert("names".into(), def_names());
    m.insert("case".into(), def_case());
    m.insert("turn".into(), def_turn());
    m.insert("input".into(), def_input());
    m.insert("resume".into(), def_resume());
    m.insert("models".into(), def_models());
    m.insert("reply".into(), def_reply());
    m.insert("stub".into(), def_stub());
    m.insert("expect".into(), def_expect());
    Value::Object(m)
}

fn def_names() -> Value {
    json!({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})
}

fn def_case() -> Value {
    json!({
        "type": "object",
        "required": ["name"],
        "additionalProperties": false,
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            "graph": {"type": "string"},
            "input": {"$ref": "#/$defs/input"},
            "resume": {"$ref": "#/$defs/resume"},
            "models": {"$ref": "#/$defs/models"},
            "tools": {"type": "array", "items": {"$ref": "#/$defs/stub"}},
            "real_tools": {"$ref": "#/$defs/names", "description": "tools (or partitions) that really run"},
            "expect": {"$ref": "#/$defs/expect"},
            "turns": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/turn"}, "prefixItems": [{"required": ["input"]}]}
        },
        "oneOf": [{"required": ["input"]}, {"required": ["turns"]}]
    })
}

fn def_turn() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "input": {"$ref": "#/$defs/input"},
            "resume": {"$ref": "#/$defs/resume"},
            "models": {"$ref": "#/$defs/models"},
            "tools": {"type": "array", "items": {"$ref": "#/$defs/stub"}},
            "expect": {"$ref": "#/$defs/expect"}
        },
        "oneOf": [{"required": ["input"]}, {"required": ["resume"]}]
    })
}

fn def_input() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "minProperties": 1,
        "properties": {
            "message": {"type": "string", "description": "the user's message, appended to the conversation"},
            "messages": {"type": "array", "items": {
                "type": "object",
                "required": ["role"],
                "properties": {"role": {"enum": ["system", "user", "assistant", "tool"]}, "content": {"type": "string"}}
            }},
            "state": {"type": "object", "description": "state fields set outright"}
        }
    })
}

fn def_resume() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {"value": {}, "answers": {"type": "object"}},
        "oneOf": [{"required": ["value"]}, {"required": ["answers"]}]
    })
}

fn def_models() -> Value {
    json!({
        "type": "object",
        "description": "scripted replies per node id (`*`: any node), consumed one per call",
        "additionalProperties": {"oneOf": [{"$ref": "#/$defs/reply"}, {"type": "array", "items": {"$ref": "#/$defs/reply"}}]}
    })
}

fn def_reply() -> Value {
    json!({"oneOf": [
        {"type": "string"},
        {
            "type": "object",
            "additionalProperties": false,
            "minProperties": 1,
            "properties": {
                "text": {"type": "string"},
                "json": {},
                "reasoning": {"type": "string"},
                "tool_calls": {"type": "array", "items": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": false,
                    "properties": {"name": {"type": "string"}, "args": {"type": "object"}, "id": {"type": "string"}}
                }},
                "error": {
                    "type": "object",
                    "required": ["status"],
                    "additionalProperties": false,
                    "properties": {"status": {"type": "integer", "minimum": 400, "maximum": 599}, "message": {"type": "string"}}
                },
                "timeout": {"const": true},
                "request": {"type": "string", "description": "the fingerprint of the request this reply answered when recorded; a call whose request differs is not answered by it"},
                "usage": {
                    "type": "object",
                    "required": ["prompt", "completion"],
                    "additionalProperties": false,
                    "properties": {"prompt": {"type": "integer", "minimum": 0}, "completion": {"type": "integer", "minimum": 0}}
                }
            }
        }
    ]})
}

fn def_stub() -> Value {
    json!({
        "type": "object",
        "required": ["name"],
        "additionalProperties": false,
        "properties": {
            "name": {"type": "string", "description": "the tool, or `http` for an http node's request"},
            "args": {"type": "object", "description": "arguments the call must contain"},
            "schema": {"type": "object", "description": "the tool's argument JSON Schema, for a tool no registry provides (an MCP server's)"},
            "result": {},
            "error": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"type": {"enum": STUB_ERRORS}, "message": {"type": "string"}}
            },
            "partition": {"type": "string"},
            "node": {"type": "string"}
        },
        "oneOf": [{"required": ["result"]}, {"required": ["error"]}]
    })
}

fn def_expect() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "path": {"$ref": "#/$defs/names"},
            "nodes": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"set": {"$ref": "#/$defs/names"}, "includes": {"$ref": "#/$defs/names"}, "excludes": {"$ref": "#/$defs/names"}}
            },
            "routes": {"type": "object", "additionalProperties": {"oneOf": [{"type": ["string", "boolean", "integer"]}, {"type": "array"}]}},
            "tool_calls": {"type": "array", "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": false,
                "properties": {"name": {"type": "string"}, "args": {"type": "object"}, "exact": {"type": "boolean"}, "node": {"type": "string"}}
            }},
            "state": {"type": "object"},
            "after": {"type": "object", "additionalProperties": {"type": "object"}},
            "answer": {"oneOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "equals": {"type": "string"},
                        "contains": {"$ref": "#/$defs/names"},
                        "excludes": {"$ref": "#/$defs/names"},
                        "regex": {"type": "string"},
                        "json_path": {"type": "string"},
                        "value": {}
                    },
                    "dependentRequired": {"json_path": ["value"], "value": ["json_path"]}
                }
            ]},
            "status": {"enum": ["completed", "failed", "interrupted"]},
            "error": {"type": "string"},
            "interrupts": {"type": "array"},
            "stream": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "includes": {"type": "array", "items": {"type": "object", "required": ["type"]}},
                    "excludes": {"type": "array", "items": {"type": "object", "required": ["type"]}}
                }
            },
            "aisdk_valid": {"type": "boolean"},
            "judge": {
                "description": "criteria a judge model checks the answer against (--judge ROLE or [testing] judge); not judged without one",
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "items": {"type": "string", "minLength": 1}}
                ]
            }
        }
    })
}
