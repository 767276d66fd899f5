//! Expiry under load on the default allocator (glibc's malloc on Linux): see
//! `load_harness.rs` for what is measured and how.

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;
mod load_harness;

fn main() {
    load_harness::main("the system allocator");
}
