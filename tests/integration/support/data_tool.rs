//! A stand-in data tool for tests that run the shipped chat graph (shared
//! by the test binaries through `#[path]`).

use std::sync::Arc;

/// A stand-in for a data source in the chat graph's `data` partition (the
/// Data360 MCP server in production, `tests/fixtures/data360` in the
/// end-to-end tests): `indicator_value {country, indicator}` answers a
/// fixed figure, so the data nodes have data to work from.
#[derive(Debug)]
pub struct IndicatorValue {
    spec: stategraph::internals::tools::ToolSpec,
}

impl IndicatorValue {
    /// The tool.
    pub fn new() -> Self {
        Self {
            spec: stategraph::internals::tools::ToolSpec {
                name: "indicator_value".into(),
                description: "The latest value of an indicator for a country.".into(),
                input_schema: Arc::new(serde_json::json!({
                    "type": "object",
                    "properties": {"country": {"type": "string"}, "indicator": {"type": "string"}}
                })),
                output_schema: None,
                partition: "data".into(),
                policy: stategraph::internals::tools::ToolPolicy::default(),
            },
        }
    }
}

impl stategraph::internals::tools::Tool for IndicatorValue {
    fn spec(&self) -> &stategraph::internals::tools::ToolSpec {
        &self.spec
    }

    fn call(
        &self,
        args: serde_json::Value,
    ) -> futures::future::BoxFuture<
        '_,
        Result<serde_json::Value, stategraph::internals::tools::ToolError>,
    > {
        Box::pin(async move {
            Ok(serde_json::json!({
                "country": args["country"].as_str().unwrap_or("KEN"),
                "indicator": args["indicator"].as_str().unwrap_or("WB_WDI_SP_POP_TOTL"),
                "year": 2022,
                "value": 42
            }))
        })
    }
}
