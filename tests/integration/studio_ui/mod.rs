//! The studio: its files and API, and its views in a real browser (Chromium).

mod studio;
mod studio_calls;
mod studio_debug;
mod studio_judge;
