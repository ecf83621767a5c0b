//! The JSON Schema of graph files (`stategraph schema`), for YAML language
//! servers: completion of keys and kinds, and checks while typing.
//!
//! It is generated from the same tables compilation uses — the kinds and
//! their settings ([`NodeKinds`]) — so it cannot drift from what `check`
//! accepts. It describes shapes only; names (fields, nodes, prompts, tools)
//! are checked by `stategraph check`.

use serde_json::{Map, Value, json};

use super::kinds::NodeKinds;
use super::spec::COMMON_NODE_KEYS;

/// The JSON Schema (draft 2020-12) of a graph file for these kinds.
pub(crate) fn graph_file_schema<K: NodeKinds>(kinds: &K) -> Value {
    let names =
        json!({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]});
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://stategraph.dev/schema/graph-file.json",
        "title": "stategraph graph file",
        "description": "One graph: its state, nodes and edges. Reference: docs/graph-files.md",
        "type": "object",
        "required": ["state", "entry", "nodes"],
        "additionalProperties": false,
        "properties": {
            "description": {"type": "string"},
            "state": {
                "description": "A registered state's name, or the fields declared here",
                "oneOf": [
                    {"type": "string"},
                    {
                        "type": "object",
                        "required": ["fields"],
                        "additionalProperties": false,
                        "properties": {
                            "type": {"type": "string", "description": "a registered state these fields extend"},
                            "fields": {"type": "object", "additionalProperties": {"$ref": "#/$defs/field"}}
                        }
                    }
                ]
            },
            "entry": names,
            "recursion_limit": {"type": "integer", "minimum": 1, "maximum": 10000},
            "chat": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "history": {"type": "string"},
                    "text": {"type": "string"},
                    "answer": {"type": "string"},
                    "carry": {"type": "array", "items": {"type": "string"}},
                    "inputs": {"type": "object", "additionalProperties": {"type": "string"}}
                }
            },
            "config": {"type": "object", "description": "values bound tool arguments read as `config.NAME` (constants; never from a request)"},
            "external_tools": {"type": "array", "items": {"type": "string"}},
            "optional_tools": {"type": "array", "items": {"type": "string"}},
            "nodes": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            "edges": {"type": "array", "items": {"$ref": "#/$defs/edge"}}
        },
        "$defs": {
            "type": type_decl(),
            "field": {
                "allOf": [{"$ref": "#/$defs/type"}],
                "properties": {
                    "default": {},
                    "reducer": {"type": "string", "description": "last (default), append, merge_by_id, or a registered reducer"},
                    "key": {"type": "string", "description": "merge key of merge_by_id (default id)"}
                },
                "unevaluatedProperties": false
            },
            "node": node(kinds),
            "edge": edge(),
            "retry": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "attempts": {"type": "integer", "minimum": 1, "maximum": 20},
                    "backoff": {"$ref": "#/$defs/duration"},
                    "max_backoff": {"$ref": "#/$defs/duration"}
                }
            },
            "duration": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9.]+(ms|s|m|h|d)?$"}]}
        }
    })
}

fn type_decl() -> Value {
    let type_names = [
        "string", "integer", "number", "boolean", "array", "object", "messages", "any", "null",
    ];
    json!({
        "type": "object",
        "properties": {
            "type": {"oneOf": [
                {"enum": type_names},
                {"type": "array", "items": {"enum": type_names}}
            ]},
            "enum": {"type": "array", "items": {"type": "string"}},
            "items": {"$ref": "#/$defs/type"},
            "properties": {"type": "object", "additionalProperties": {"$ref": "#/$defs/type"}},
            "required": {"type": "array", "items": {"type": "string"}},
            "additionalProperties": {"type": "boolean"},
            "nullable": {"type": "boolean"},
            "minimum": {"type": "number"},
            "maximum": {"type": "number"},
            "maxLength": {"type": "integer", "minimum": 0},
            "maxItems": {"type": "integer", "minimum": 0},
            "description": {"type": "string"}
        }
    })
}

fn node<K: NodeKinds>(kinds: &K) -> Value {
    let mut names = kinds.names();
    names.sort_unstable();
    let per_kind: Vec<Value> = names
        .iter()
        .filter_map(|name| kinds.info(name))
        .map(|info| {
            let props: Map<String, Value> = info
                .settings
                .iter()
                .map(|s| {
                    let mut schema: Value =
                        serde_json::from_str(s.schema).unwrap_or_else(|_| json!({}));
                    if let Value::Object(m) = &mut schema {
                        m.insert("description".into(), json!(s.doc));
                    }
                    (s.name.to_owned(), schema)
                })
                .collect();
            json!({
                "if": {"properties": {"kind": {"const": info.name}}, "required": ["kind"]},
                "then": {"properties": props, "description": info.doc}
            })
        })
        .collect();
    let common: Map<String, Value> = COMMON_NODE_KEYS
        .iter()
        .map(|k| {
            let schema = match *k {
                "kind" => json!({"enum": names}),
                "writes" => json!({"type": "array", "items": {"type": "string"}}),
                "surface" => json!({"enum": ["answer", "thinking", "hidden"]}),
                "retry" => json!({"$ref": "#/$defs/retry"}),
                "timeout" => json!({"$ref": "#/$defs/duration"}),
                "status" => json!({"type": "string", "description": "progress shown when the node starts (data-stage)"}),
                _ => json!({"type": "string"}),
            };
            ((*k).to_owned(), schema)
        })
        .collect();
    json!({
        "type": "object",
        "required": ["id", "kind"],
        "properties": common,
        "allOf": per_kind,
        "unevaluatedProperties": false
    })
}

fn edge() -> Value {
    let names =
        json!({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]});
    json!({"oneOf": [
        {"type": "string", "pattern": "^\\s*[^\\s].*->.*[^\\s]\\s*$", "description": "from -> to"},
        {
            "type": "object",
            "required": ["from"],
            "additionalProperties": false,
            "properties": {
                "from": names,
                "to": names,
                "route": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "on": {"type": "string", "description": "a state field"},
                        "expr": {"type": "string", "description": "an expression over the state"},
                        "cases": {"type": "object", "additionalProperties": {"type": "string"}},
                        "default": {"type": "string"}
                    }
                },
                "map": {
                    "type": "object",
                    "required": ["over", "to"],
                    "additionalProperties": false,
                    "properties": {
                        "over": {"type": "string", "description": "a list field or an expression"},
                        "to": {"type": "string"},
                        "on_empty": {"enum": ["skip", "fail"], "description": "an empty list: skip the target and go on from its edges (default), or fail the run"}
                    }
                }
            }
        }
    ]})
}
