//! Built-in tools (partition `basic`): `calculator` and `current_time`.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Tool, ToolError, ToolPolicy, ToolSpec};

/// All built-in tools.
pub(crate) fn all() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(Calculator::new()), Arc::new(CurrentTime::new())]
}

/// Evaluates arithmetic: `+ - * / ^`, parentheses, decimals.
#[derive(Debug)]
pub(crate) struct Calculator {
    spec: ToolSpec,
}

impl Calculator {
    fn new() -> Self {
        Self {
            spec: ToolSpec {
                name: "calculator".into(),
                description: "Evaluate an arithmetic expression with + - * / ^ and parentheses."
                    .into(),
                input_schema: Arc::new(json!({
                    "type": "object",
                    "properties": {"expression": {"type": "string", "maxLength": 1000}},
                    "required": ["expression"],
                    "additionalProperties": false
                })),
                output_schema: Some(Arc::new(json!({
                    "type": "object",
                    "properties": {
                        "expression": {"type": "string", "description": "The expression as given."},
                        "result": {"type": "number", "description": "Its value (whole numbers as integers)."}
                    },
                    "required": ["expression", "result"],
                    "additionalProperties": false
                }))),
                partition: "basic".into(),
                policy: ToolPolicy::default(),
            },
        }
    }
}

impl Tool for Calculator {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let expr = args["expression"].as_str().unwrap_or_default();
            let result = eval(expr).map_err(ToolError::Execution)?;
            // Whole numbers as integers: `4`, not `4.0`, as people (and JSON in JavaScript) write them.
            let result = if result.fract() == 0.0 && result.abs() < 9e15 {
                json!(result as i64)
            } else {
                json!(result)
            };
            Ok(json!({ "expression": expr, "result": result }))
        })
    }
}

/// Returns the current UTC time.
#[derive(Debug)]
pub(crate) struct CurrentTime {
    spec: ToolSpec,
}

impl CurrentTime {
    fn new() -> Self {
        Self {
            spec: ToolSpec {
                name: "current_time".into(),
                description: "The current date and time in UTC (RFC 3339) and as a Unix timestamp."
                    .into(),
                input_schema: Arc::new(
                    json!({"type": "object", "properties": {}, "additionalProperties": false}),
                ),
                output_schema: Some(Arc::new(json!({
                    "type": "object",
                    "properties": {
                        "utc": {"type": "string", "description": "RFC 3339, `2026-11-27T20:30:00Z`."},
                        "unix": {"type": "integer", "description": "Seconds since 1970-01-01 UTC."}
                    },
                    "required": ["utc", "unix"],
                    "additionalProperties": false
                }))),
                partition: "basic".into(),
                policy: ToolPolicy::default(),
            },
        }
    }
}

impl Tool for CurrentTime {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, _args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let secs = crate::events::now_micros() / 1_000_000;
            Ok(json!({ "utc": rfc3339(secs), "unix": secs }))
        })
    }
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days).
pub(crate) fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Evaluates an arithmetic expression.
///
/// # Errors
/// A syntax error, division by zero or nesting deeper than 64.
pub(crate) fn eval(expr: &str) -> Result<f64, String> {
    let mut p = Parser {
        s: expr.as_bytes(),
        i: 0,
        depth: 0,
    };
    let v = p.sum()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!(
            "unexpected `{}` at position {}",
            p.s[p.i] as char,
            p.i + 1
        ));
    }
    if v.is_finite() {
        Ok(v)
    } else {
        Err("result is not a finite number (division by zero?)".into())
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: u32,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn sum(&mut self) -> Result<f64, String> {
        let mut v = self.product()?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let r = self.product()?;
            v = if op == b'+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn product(&mut self) -> Result<f64, String> {
        let mut v = self.power()?;
        while let Some(op @ (b'*' | b'/')) = self.peek() {
            self.i += 1;
            let r = self.power()?;
            v = if op == b'*' { v * r } else { v / r };
        }
        Ok(v)
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.unary()?;
        if self.peek() == Some(b'^') {
            self.i += 1;
            let exp = self.power()?;
            return Ok(base.powf(exp));
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > 64 {
            return Err("expression nested too deeply".into());
        }
        let v = match self.peek() {
            Some(b'-') => {
                self.i += 1;
                -self.unary()?
            }
            Some(b'(') => {
                self.i += 1;
                let v = self.sum()?;
                if self.peek() != Some(b')') {
                    return Err("missing `)`".into());
                }
                self.i += 1;
                v
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'.')
                {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                text.parse()
                    .map_err(|_| format!("`{text}` is not a number"))?
            }
            Some(c) => {
                return Err(format!(
                    "unexpected `{}` at position {}",
                    c as char,
                    self.i + 1
                ));
            }
            None => return Err("expression ends early".into()),
        };
        self.depth -= 1;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic() {
        assert_eq!(eval("1 + 2 * 3").unwrap(), 7.0);
        assert_eq!(eval("2 ^ 3 ^ 2").unwrap(), 512.0);
        assert_eq!(eval("-(4 - 6) / .5").unwrap(), 4.0);
        assert!(eval("1 / 0").is_err());
        assert!(eval("2 +").is_err());
        assert!(eval(&"(".repeat(500)).is_err());
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
    }
}
