//! Source locations carried by spec values, so every diagnostic can point
//! at the exact line and column a developer has to change.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer};

/// A 1-based line and column in a source file. `0:0` means unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Loc {
    /// Line, from 1.
    pub line: u32,
    /// Column (in characters), from 1.
    pub column: u32,
}

impl Loc {
    /// A location.
    pub const fn new(line: u32, column: u32) -> Self {
        Self { line, column }
    }

    /// Whether the location is known.
    pub fn is_known(&self) -> bool {
        self.line > 0
    }
}

impl From<serde_saphyr::Location> for Loc {
    fn from(l: serde_saphyr::Location) -> Self {
        Self {
            line: l.line() as u32,
            column: l.column() as u32,
        }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A value with the location it was read from. Compares by value only.
#[derive(Clone, Debug)]
pub struct Sp<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub loc: Loc,
}

impl<T> Sp<T> {
    /// Wraps a value read at `loc`.
    pub fn new(value: T, loc: Loc) -> Self {
        Self { value, loc }
    }
}

impl<T> Deref for Sp<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: PartialEq> PartialEq for Sp<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Sp<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = serde_saphyr::Spanned::<T>::deserialize(deserializer)?;
        Ok(Self {
            value: s.value,
            loc: s.referenced.into(),
        })
    }
}

impl<T: fmt::Display> fmt::Display for Sp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}
