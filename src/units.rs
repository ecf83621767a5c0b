//! Units as configuration and graph files write them: durations (`500ms`,
//! `30s`, `2m`, or milliseconds) and byte sizes (`1MiB`, `512KiB`).
//!
//! A leaf module: the graph file format, the model and tool configuration
//! and the server configuration all read these the same way.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A duration: an integer number of milliseconds or a string such as
/// `500ms`, `30s`, `2m`, `1h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Dur {
    /// Parses `500ms`, `30s`, `2m`, `1h`, `7d` or a bare number of milliseconds.
    pub fn parse(s: &str) -> Option<Duration> {
        let s = s.trim();
        let split = s
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: f64 = num.parse().ok()?;
        let ms = match unit.trim() {
            "" | "ms" => n,
            "s" => n * 1e3,
            "m" => n * 60e3,
            "h" => n * 3600e3,
            "d" => n * 86_400e3,
            _ => return None,
        };
        (ms.is_finite() && (0.0..1e12).contains(&ms))
            .then(|| Duration::from_micros((ms * 1e3) as u64))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 500ms, 30s, 2m or a number of milliseconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(Duration::from_millis(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                u64::try_from(v)
                    .map(|v| Dur(Duration::from_millis(v)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                Dur::parse(v).map(Dur).ok_or_else(|| {
                    E::custom(format!(
                        "`{v}` is not a duration; write e.g. 500ms, 30s or 2m"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// A byte size read as `1MiB`, `512KiB`, `1000000` or `2MB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub usize);

impl Bytes {
    /// Parses a size.
    pub fn parse(s: &str) -> Option<usize> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (n, unit) = s.split_at(split);
        let n: usize = n.parse().ok()?;
        let mult = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1000,
            "kib" | "k" => 1024,
            "mb" => 1_000_000,
            "mib" | "m" => 1024 * 1024,
            "gib" | "g" => 1024 * 1024 * 1024,
            _ => return None,
        };
        n.checked_mul(mult)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(usize),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Bytes(n)),
            Raw::S(s) => Bytes::parse(&s).map(Bytes).ok_or_else(|| {
                serde::de::Error::custom(format!("`{s}` is not a size; write e.g. 1MiB or 512KiB"))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(Dur::parse("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(Dur::parse("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(Dur::parse("2m"), Some(Duration::from_secs(120)));
        assert_eq!(Dur::parse("250"), Some(Duration::from_millis(250)));
        assert_eq!(Dur::parse("soon"), None);
        assert_eq!(Dur::parse("-1s"), None);
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(Bytes::parse("1MiB"), Some(1024 * 1024));
        assert_eq!(Bytes::parse("2MB"), Some(2_000_000));
        assert_eq!(Bytes::parse("12"), Some(12));
        assert_eq!(Bytes::parse("lots"), None);
    }
}
