//! Memory on the default allocator (glibc's malloc on Linux): see `memory_harness.rs` for
//! what is measured and how.

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;
mod memory_harness;

#[global_allocator]
static ALLOCATOR: common::counting::Counting<std::alloc::System> =
    common::counting::Counting(std::alloc::System);

fn main() {
    memory_harness::main("the system allocator");
}
