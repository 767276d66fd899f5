//! Expiry under load with mimalloc as the global allocator: the floor that the default
//! allocator's figures (`load.rs`) are compared with. See `load_harness.rs`.

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;
mod load_harness;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    load_harness::main("mimalloc");
}
