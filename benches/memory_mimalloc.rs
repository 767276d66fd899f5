//! Memory with mimalloc as the global allocator, beside `memory.rs` on the default one: what
//! each allocator does with the memory a timer gives back. See `memory_harness.rs`.

// This binary reports by printing a table.
#![allow(clippy::print_stdout)]

mod common;
mod memory_harness;

#[global_allocator]
static ALLOCATOR: common::counting::Counting<mimalloc::MiMalloc> =
    common::counting::Counting(mimalloc::MiMalloc);

fn main() {
    memory_harness::main("mimalloc");
}
