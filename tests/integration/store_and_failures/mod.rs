//! The store and surviving failures: every backend's conformance, durability, crashes and injected faults.

mod crash;
mod durability;
mod faults;
mod store_conformance;
